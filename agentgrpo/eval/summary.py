"""From episode records to an evaluation's figures (DESIGN §7, §7.1). Pure: no torch, no I/O.

pass^k and pass@k, pass^1 per split, per family and over the training splits, the seed's
Generalization, the error rate and the reasoning depth, as before; and for statistical
power: a 95% bootstrap interval over tasks for every pass^k, pass@k, split pass^1 and
Generalization (``metrics["ci"]``, from ``agentgrpo.eval.stats``), the do-nothing floor
and pass^1 on the tasks that need a database write (from ``TaskFacts``), and how well
PRM-Lite's process score separates successful from failed episodes (AUROC); the headline
figures of ``agentgrpo.eval.figures`` (family-balanced, τ-bench-weighted, write and no-write
pass^1), each with an interval that resamples tasks within families; and how many episodes
were cut off at the turn or token budget (they score 0, as in τ-bench).

The per-task rows keep each trial's success, user seed and process score, so two
evaluations of the same tasks can be paired later (``agentgrpo.eval.compare``).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from agentgrpo.envs.registry import TRAIN_SPLITS
from agentgrpo.envs.types import CUT_OFF
from agentgrpo.eval.figures import FIGURES, figure_weights, task_kind, tau_bench_weights, weighted_mean
from agentgrpo.eval.metrics import (
    SEED_SPLIT_WEIGHTS,
    generalization,
    pass_at_k,
    pass_hat_k,
    task_pass_at_k,
    task_pass_hat_k,
)
from agentgrpo.eval.stats import (
    Estimate,
    bootstrap_auroc,
    bootstrap_mean,
    bootstrap_stratified,
    hierarchical_bootstrap,
)
from agentgrpo.eval.tasks import TaskFacts
from agentgrpo.eval.types import EpisodeRecord
from agentgrpo.stats_util import percentile_50


def summarize(records: list[EpisodeRecord], trials: int, split_sizes: dict[str, int],
              facts: Mapping[str, TaskFacts] | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Metrics and per-task rows from episode records (tests call it directly).

    Aborted episodes are left out of everything but ``metrics["aborted"]`` and
    ``tau_bench_pass^k`` (τ-bench's count: an episode that crashed is a failure, so every
    task keeps its n trials); pass^k and pass@k are over the tasks with at least k finished
    trials (``pass^k_tasks[k]``).
    ``facts`` (task id → ``TaskFacts``) gives the do-nothing floor and the write tasks;
    without it those figures are None.
    """
    finished = [r for r in records if not r.aborted]
    per_task = task_rows(finished, facts)
    counted = aborted_as_failures(records)

    def pass1(rows: list[dict]) -> float:
        return pass_hat_k([r["successes"] for r in rows], 1) if rows else 0.0

    def at_least(k: int) -> list[list[bool]]:
        return [t["successes"] for t in per_task if len(t["successes"]) >= k]

    by_split = {s: pass1(split_rows(per_task, s)) for s in split_sizes if split_sizes[s]}
    if split_rows(per_task, SEEN_FAMILIES):
        by_split[SEEN_FAMILIES] = pass1(split_rows(per_task, SEEN_FAMILIES))
    families = sorted({t["family"] for t in per_task})
    known = [t for t in per_task if t["write"] is not None]
    writes = [t for t in known if t["write"]]
    metrics = {
        "pass^k": {k: pass_hat_k(at_least(k), k) for k in range(1, trials + 1)},
        "pass@k": {k: pass_at_k(at_least(k), k) for k in range(1, trials + 1)},
        "pass^k_tasks": {k: len(at_least(k)) for k in range(1, trials + 1)},
        "tau_bench_pass^k": {k: pass_hat_k(counted, k) for k in range(1, trials + 1)
                             if all(len(t) >= k for t in counted)},
        "pass^1_by_split": by_split,
        "pass^1_by_family": {f: pass1([t for t in per_task if t["family"] == f]) for f in families},
        "generalization": generalization(by_split, split_sizes),
        "write_pass^1": pass1(writes) if known else None,
        "write_tasks": len(writes),
        **{FIGURE_KEYS[f]: _figure(per_task, f) for f in FIGURES if f not in ("overall", "write")},
        "tau_bench_weights": tau_bench_weights([task_kind(t["write"], t["do_nothing"]) for t in known]),
        "cut_off": sum(r.termination in CUT_OFF for r in finished),
        "do_nothing_floor": _mean([t["do_nothing"] for t in known]) if known else None,
        "do_nothing_floor_by_split": {s: _mean([t["do_nothing"] for t in split_rows(known, s)])
                                      for s in by_split if split_rows(known, s)},
        "prm_auroc": prm_auroc(per_task),
        "error_rate": sum(r.has_error for r in finished) / len(finished) if finished else 0.0,
        "reasoning_depth_p50": percentile_50([n for r in finished for n in r.turn_tokens]),
        "episodes": len(finished),
        "aborted": len(records) - len(finished),
        "tasks": len({r.task_id for r in records}),
    }
    metrics["ci"] = intervals(per_task, trials, split_sizes, list(by_split))
    metrics["ci"]["tau_bench_pass^k"] = {k: bootstrap_mean([task_pass_hat_k(t, k) for t in counted]).to_dict()
                                         for k in metrics["tau_bench_pass^k"]}
    return metrics, per_task


def aborted_as_failures(records: list[EpisodeRecord]) -> list[list[bool]]:
    """Each task's trial outcomes with aborted episodes counted as failures (τ-bench's rule)."""
    by_task: dict[str, list[bool]] = {}
    for record in records:
        by_task.setdefault(record.task_id, []).append(not record.aborted and record.reward == 1.0)
    return list(by_task.values())


def task_rows(finished: list[EpisodeRecord], facts: Mapping[str, TaskFacts] | None) -> list[dict[str, Any]]:
    """One row per task with a finished trial, its trials in order (first-seen task order)."""
    by_task: dict[str, list[EpisodeRecord]] = {}
    for record in finished:
        by_task.setdefault(record.task_id, []).append(record)
    rows = []
    for task_id, records in by_task.items():
        records = sorted(records, key=lambda r: r.trial)
        fact = facts.get(task_id) if facts else None
        rows.append({
            "task_id": task_id, "split": records[0].split, "family": records[0].family,
            "successes": [r.reward == 1.0 for r in records],
            "trials": [r.trial for r in records],
            "user_seeds": [r.user_seed for r in records],
            "process_scores": [r.process_score for r in records],
            "write": fact.write if fact else None,
            "do_nothing": fact.do_nothing if fact else None,
        })
    return rows


SEEN_FAMILIES = "seen_families"
"""pass^1 over covered_seen and uncovered_seen together: the tasks of the families training saw. On
held-out worlds these are new tasks of those families, not the tasks trained on."""


def split_rows(rows: Sequence[Mapping[str, Any]], split: str) -> list[Mapping[str, Any]]:
    """Rows of ``split``; ``seen_families`` is covered_seen and uncovered_seen together."""
    names = TRAIN_SPLITS if split == SEEN_FAMILIES else (split,)
    return [r for r in rows if r["split"] in names]


def task_pass1(row: Mapping[str, Any]) -> float:
    """A task's pass^1: the share of its finished trials that succeeded."""
    return task_pass_hat_k(row["successes"], 1)


def intervals(per_task: list[dict[str, Any]], trials: int, split_sizes: Mapping[str, int],
              splits: Sequence[str]) -> dict[str, Any]:
    """95% bootstrap intervals over tasks (``Estimate.to_dict``) of the headline figures.

    Generalization resamples within uncovered_seen and unseen separately (its weights are
    the split sizes, so each resample keeps them); everything else resamples all its tasks.
    """
    def estimate(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        return bootstrap_mean([task_pass1(r) for r in rows]).to_dict()

    ci: dict[str, Any] = {"pass^k": {}, "pass@k": {}}
    for k in range(1, trials + 1):
        rows = [t for t in per_task if len(t["successes"]) >= k]
        ci["pass^k"][k] = bootstrap_mean([task_pass_hat_k(t["successes"], k) for t in rows]).to_dict()
        ci["pass@k"][k] = bootstrap_mean([task_pass_at_k(t["successes"], k) for t in rows]).to_dict()
    ci["pass^1_by_split"] = {s: estimate(split_rows(per_task, s)) for s in splits}
    strata = {s: [task_pass1(r) for r in split_rows(per_task, s)] for s in SEED_SPLIT_WEIGHTS if s in splits}
    ci["generalization"] = bootstrap_stratified(strata, lambda m: generalization(m, split_sizes)).to_dict()
    known = [t for t in per_task if t["write"] is not None]
    if known:
        ci["write_pass^1"] = estimate([t for t in known if t["write"]])
        if any(not t["write"] for t in known):
            ci["no_write_pass^1"] = estimate([t for t in known if not t["write"]])
        ci["do_nothing_floor"] = bootstrap_mean([t["do_nothing"] for t in known]).to_dict()
    for figure in ("family", "tau_bench"):  # weighted over families: resampled within them
        weights = figure_weights(per_task, figure) if per_task else None
        if weights is not None:
            ci[FIGURE_KEYS[figure]] = hierarchical_bootstrap(
                [[task_pass1(r) for r in per_task]], weights, [r["family"] for r in per_task]).to_dict()
    return ci


FIGURE_KEYS = {"overall": "pass^1", "family": "family_pass^1", "tau_bench": "tau_bench_pass^1",
               "write": "write_pass^1", "no_write": "no_write_pass^1"}
"""Each headline figure's key in an evaluation's ``metrics`` (and ``metrics["ci"]``)."""


def _figure(per_task: list[dict[str, Any]], figure: str) -> float | None:
    weights = figure_weights(per_task, figure) if per_task else None
    return None if weights is None else weighted_mean([task_pass1(r) for r in per_task], weights)


def prm_auroc(per_task: list[dict[str, Any]]) -> dict[str, Any] | None:
    """AUROC of PRM-Lite's process score for success vs failure over the finished episodes
    that have a score, with a bootstrap interval over tasks; None without scores. ``value``
    is None (not NaN, which JSON lacks) when every scored episode succeeded or every one failed."""
    scores, labels = [], []
    for row in per_task:
        kept = [(s, ok) for s, ok in zip(row["process_scores"], row["successes"])
                if s is not None and math.isfinite(s)]
        if kept:
            scores.append([s for s, _ in kept])
            labels.append([ok for _, ok in kept])
    if not scores:
        return None
    est = bootstrap_auroc(scores, labels)
    successes = sum(sum(x) for x in labels)
    out: dict[str, Any] = _finite(est) | {"successes": successes, "failures": est.n - successes}
    return out


def _finite(est: Estimate) -> dict[str, Any]:
    return {key: (None if isinstance(v, float) and math.isnan(v) else v) for key, v in est.to_dict().items()}


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0
