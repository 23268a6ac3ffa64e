"""Paired comparison of two evaluations of the same tasks (DESIGN §7.1).

Two checkpoints evaluated with the same config (tasks, trials, user seeds) differ on each
task by luck only through the policy, so the difference of their pass^1 is estimated per
task and bootstrapped over tasks (``agentgrpo.eval.stats.paired_difference``): the task
difficulty both share cancels, and the interval is much narrower than two independent
ones. ``compare_evals`` refuses evaluations that are not paired — other tasks, another
number of trials, other user seeds, or a trial one of them lost to an aborted episode —
because then the per-task differences mix policy and task.

    from agentgrpo.eval.compare import compare_evals
    diff = compare_evals("runs/eval_grpo", "runs/eval_sft")   # GRPO − SFT
    print(diff.overall.format(signed=True), diff.to_markdown())

From the command line: ``agentgrpo eval --policy runs/grpo/final --compare-to runs/eval_sft``
evaluates, then writes the paired difference to ``compare.md`` / ``compare.json``.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgrpo.config import AgentGRPOError, MissingFileError
from agentgrpo.eval.figures import figure_weights
from agentgrpo.eval.metrics import SEED_SPLIT_WEIGHTS, generalization
from agentgrpo.eval.stats import Estimate, bootstrap_stratified, hierarchical_bootstrap, paired_difference
from agentgrpo.eval.summary import SEEN_FAMILIES, split_rows, task_pass1

EvalSource = str | Path | Mapping[str, Any] | Any
"""An evaluation: its out_dir, its eval.json, the dict read from it, or an ``EvalReport``."""


class PairingError(AgentGRPOError, ValueError):
    """Two evaluations that cannot be paired (different tasks, trials or user seeds)."""


@dataclass(frozen=True)
class Comparison:
    """``a − b`` per figure: pass^1 differences with 95% paired-bootstrap intervals over tasks."""

    a: str
    b: str
    tasks: int
    trials: int
    overall: Estimate
    """pass^1 over every task."""
    by_split: dict[str, Estimate] = field(default_factory=dict)
    """pass^1 of each split evaluated, and ``seen_families`` (covered_seen + uncovered_seen: the families
    training saw, in whatever worlds the tasks come from) when present."""
    generalization: Estimate | None = None
    """The seed's Generalization (split-size-weighted uncovered_seen and unseen), resampled per split."""
    write: Estimate | None = None
    """pass^1 on the tasks whose gold actions write to the database."""
    figures: dict[str, Estimate] = field(default_factory=dict)
    """The other headline figures (``agentgrpo.eval.figures``): ``family`` (every family alike),
    ``tau_bench`` (τ-bench airline's mix of kinds), ``no_write``; tasks resampled within families."""

    def estimates(self) -> dict[str, Estimate]:
        """Every difference by name (``overall``, ``family``, ``tau_bench``, ``write``, ``no_write``,
        ``generalization``, ``split/<name>``)."""
        named = {"overall": self.overall, "family": self.figures.get("family"),
                 "tau_bench": self.figures.get("tau_bench"), "write": self.write,
                 "no_write": self.figures.get("no_write"), "generalization": self.generalization}
        named.update({f"split/{s}": e for s, e in self.by_split.items()})
        return {k: v for k, v in named.items() if v is not None}

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "tasks": self.tasks, "trials": self.trials,
                "difference": {k: e.to_dict() for k, e in self.estimates().items()}}

    def to_markdown(self) -> str:
        lines = [f"Paired difference `{self.a}` − `{self.b}` ({self.tasks} tasks × {self.trials} trial(s), "
                 "95% paired bootstrap over tasks):", "", "| pass^1 | difference [95% CI] | |", "|---|---|---|"]
        for name, est in self.estimates().items():
            verdict = "interval excludes 0" if est.excludes_zero else "within noise"
            lines.append(f"| {name.removeprefix('split/')} | {est.format(signed=True)} | {verdict} |")
        return "\n".join(lines) + "\n"


def load_eval(source: EvalSource) -> dict[str, Any]:
    """The eval.json content of ``source`` (a directory, a file, a dict or an ``EvalReport``)."""
    if hasattr(source, "to_dict"):
        return source.to_dict()
    if isinstance(source, Mapping):
        return dict(source)
    path = Path(source)
    path = path / "eval.json" if path.is_dir() else path
    if not path.is_file():
        raise MissingFileError(f"no evaluation at {source}: pass an `agentgrpo eval` out_dir or its eval.json")
    return json.loads(path.read_text())


def compare_evals(a: EvalSource, b: EvalSource, *, names: tuple[str, str] | None = None,
                  require_user_seeds: bool = True) -> Comparison:
    """``a − b`` on pass^1 overall, family-balanced, τ-bench-weighted, on write and no-write tasks,
    per split, on train and on Generalization.

    Raises ``PairingError`` unless both evaluated the same tasks (same ids and splits) with
    the same trials and the same user seed for every trial, and kept every trial (an
    aborted episode must be resumed first). ``require_user_seeds=False`` pairs runs that did
    not record their user seeds (τ-bench results files) by task and trial alone.
    """
    ra, rb = load_eval(a), load_eval(b)
    names = names or (str(ra.get("policy", "a")), str(rb.get("policy", "b")))
    rows_a, rows_b = paired_rows(ra, rb, names, require_user_seeds)
    pa = {t: task_pass1(r) for t, r in rows_a.items()}
    pb = {t: task_pass1(r) for t, r in rows_b.items()}
    rows = list(rows_a.values())

    def diff(selected: list[Mapping[str, Any]]) -> Estimate | None:
        ids = {r["task_id"] for r in selected}
        return paired_difference({t: pa[t] for t in ids}, {t: pb[t] for t in ids}) if ids else None

    by_split = {s: diff(split_rows(rows, s)) for s in [*ra["split_sizes"], SEEN_FAMILIES]}
    sizes = ra["split_sizes"]
    strata = {s: [pa[r["task_id"]] - pb[r["task_id"]] for r in split_rows(rows, s)]
              for s in SEED_SPLIT_WEIGHTS if s in sizes and split_rows(rows, s)}
    known = all(r.get("write") is not None for r in rows)
    figures = {}
    if known and any(not r["write"] for r in rows):
        figures["no_write"] = diff([r for r in rows if not r["write"]])
    for figure in ("family", "tau_bench"):  # weighted over families: tasks resampled within them
        weights = figure_weights(rows, figure) if all("family" in r for r in rows) else None
        if weights is not None:
            diffs = [[pa[r["task_id"]] - pb[r["task_id"]] for r in rows]]
            figures[figure] = hierarchical_bootstrap(diffs, weights, [r["family"] for r in rows])
    return Comparison(
        a=names[0], b=names[1], tasks=len(rows), trials=int(ra["trials"]),
        overall=paired_difference(pa, pb),
        by_split={s: e for s, e in by_split.items() if e is not None},
        generalization=bootstrap_stratified(strata, lambda m: generalization(m, sizes)) if strata else None,
        write=diff([r for r in rows if r.get("write")]) if known else None,
        figures=figures,
    )


def paired_rows(ra: Mapping[str, Any], rb: Mapping[str, Any], names: tuple[str, str] = ("a", "b"),
                require_user_seeds: bool = True) -> tuple[dict[str, Mapping], dict[str, Mapping]]:
    """Per-task rows (``eval.json``'s ``per_task``) of both, keyed by task id, after checking
    that they pair up (raises ``PairingError`` naming what differs; ``names`` label the two)."""
    a, b = names
    if ra.get("trials") != rb.get("trials"):
        raise PairingError(f"not paired: {a} ran {ra.get('trials')} trial(s) per task, {b} {rb.get('trials')}")
    if ra.get("seed", 0) != rb.get("seed", 0):
        raise PairingError(f"not paired: {a} used seed {ra.get('seed')}, {b} seed {rb.get('seed')} (user seeds differ)")
    rows_a = {r["task_id"]: r for r in ra.get("per_task", [])}
    rows_b = {r["task_id"]: r for r in rb.get("per_task", [])}
    if not rows_a or rows_a.keys() != rows_b.keys():
        only_a, only_b = sorted(rows_a.keys() - rows_b.keys()), sorted(rows_b.keys() - rows_a.keys())
        raise PairingError(f"not paired: the tasks differ ({len(rows_a)} vs {len(rows_b)}; only in {a}: "
                           f"{only_a[:3]}, only in {b}: {only_b[:3]}); evaluate both with the same env, splits, "
                           "tasks_per_split and heldout_seed")
    for task_id, row in rows_a.items():
        other = rows_b[task_id]
        if row["split"] != other["split"]:
            raise PairingError(f"not paired: task {task_id} is in {row['split']} for {a}, {other['split']} for {b}")
        if "user_seeds" not in row or "user_seeds" not in other:
            raise PairingError("not paired: an eval.json without per-task user seeds (written before they were "
                               "recorded); evaluate again to compare")
        if row.get("trials") != other.get("trials"):
            raise PairingError(f"not paired: task {task_id} finished trials {row.get('trials')} for {a} but "
                               f"{other.get('trials')} for {b}; `agentgrpo eval --resume` the one with aborted "
                               "episodes")
        if require_user_seeds and (row["user_seeds"] != other["user_seeds"] or None in row["user_seeds"]):
            raise PairingError(f"not paired: task {task_id} had user seeds {row['user_seeds']} for {a} but "
                               f"{other['user_seeds']} for {b}")
    return rows_a, rows_b


