"""Does GRPO make the airline agent better at its training tasks? Before/after, paired, with CIs.

Starts from ``agentgrpo sft``'s packaged default (``sft.yaml``: one world, 8 demonstrations of
each of its 16 covered tasks; trained once into ``--out``/sft unless ``--sft DIR``), measures
*sampled* success on a fixed pool of training tasks (the env's covered_seen + uncovered_seen: 40 tasks) at the rollout
temperature with ``--trials`` samples per task, trains each experiment with the mechanisms that
make groups carry signal (frontier task sampler, dynamic sampling, no AdamW step on a zero
gradient), and measures the pool again at a few checkpoints. The evaluation's user seeds come
from ``EVAL_SEED``, a stream no training rollout uses (training derives its user seeds from
``(seed, step, task, sample)``), so no evaluation reuses a sample that chose a task; every
checkpoint is evaluated on the same tasks, trials and user seeds, so differences are paired. Every
evaluation decodes as training does (the ``rollout.*`` settings, the overrides' included: with
``rollout.constrain_tool_calls=true rollout.copy_arguments=true`` both sides are the agent under
schema-guided decoding); one kept from an earlier invocation that decoded otherwise is refused.

Reports, per experiment: pool pass^1 at each checkpoint (the learning curve, with 95% bootstrap
intervals over tasks), the paired difference after − before of every headline figure (overall,
family-balanced, τ-bench-weighted, write-task and no-write pass^1) with a 95% interval that
treats GRPO seeds and tasks as random (``--seeds``: each trains its own run from the one SFT;
``agentgrpo.eval.grid.seed_aware_delta``) and the per-seed differences beside it, each family's
pass^1, and the share of informative groups per step (the first generation round's, i.e. what
training without dynamic sampling would have had, and the trained batch's). Writes
``learning.json``, ``learning.md`` and ``learning.png`` into ``--out``; ends with BENCH lines:
the headline is write-task pass^1 after − before (its interval above 0) with no-write pass^1
not lower by more than ``NON_INFERIORITY`` (its interval's low end above −0.02).

    python benchmarks/learning.py                      # vanilla and joint, ~60 min on 2 cores
    python benchmarks/learning.py --experiments joint --seeds 0,1 trainer.demo_coef=1.0   # two seeds, a lever
    python benchmarks/learning.py --experiments vanilla --steps 4 --trials 2 --out runs/learning-smoke  # smoke
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agentgrpo.cli import one_line  # noqa: E402
from agentgrpo.config import AgentGRPOError, differing_keys, load_config, to_dict  # noqa: E402
from agentgrpo.eval.compare import load_eval  # noqa: E402
from agentgrpo.eval.evaluator import EvalConfig, evaluate  # noqa: E402
from agentgrpo.eval.figures import FIGURE_LABELS, FIGURES  # noqa: E402
from agentgrpo.eval.grid import seed_aware_delta  # noqa: E402
from agentgrpo.eval.stats import Estimate, hierarchical_bootstrap  # noqa: E402
from agentgrpo.eval.summary import task_pass1  # noqa: E402
from agentgrpo.report.plots import save_figure  # noqa: E402
from agentgrpo.rollout.config import RolloutConfig  # noqa: E402
from agentgrpo.train.grpo import train_grpo  # noqa: E402
from agentgrpo.train.grpo_config import GRPOConfig  # noqa: E402
from agentgrpo.train.sft import train_sft  # noqa: E402
from agentgrpo.train.sft_config import SFTConfig  # noqa: E402
from benchmarks._common import bench  # noqa: E402

EVAL_SEED = 7_001
"""Seed of the evaluation's user simulators and sampling: no training or screening run uses it."""
POOL_SPLITS = ["covered_seen", "uncovered_seen"]
"""The fixed pool: every training task of the env's default splits (16 + 24)."""

NON_INFERIORITY = 0.02
"""How much lower no-write pass^1 may end for a write gain to count (the low end of its interval)."""
TASKS_PER_STEP = 4
LEARNING_SETTINGS = [
    "rollout.temperature=0.7",         # sampled hot enough that groups disagree (0.5 left most tied)
    f"trainer.tasks_per_step={TASKS_PER_STEP}", "trainer.group_size=8",
    "trainer.mini_batch_size=16", "trainer.micro_batch_size=8",
    "trainer.task_sampler=frontier", "trainer.dynamic_sampling=true", "trainer.max_generation_rounds=2",
    "trainer.skip_zero_grad_steps=true",
    "trainer.lr=1e-4", "algo.kl_coef=0.05",  # k3 KL to the SFT policy, 5x grpo.yaml's: the runs drift otherwise
    "trainer.lld_diagnostic=false", "trainer.old_logprobs=recompute",
    "rollout.max_turns=20", "rollout.max_new_tokens=320",
]
"""The training side of the benchmark (the experiment's own values come from its YAML)."""


def sft_checkpoint(out: Path, given: str | None) -> Path:
    """The SFT checkpoint: ``given``, or ``sft.yaml``'s trained once into ``out/sft``."""
    if given:
        return Path(given)
    final = out / "sft" / "final"
    if not (final / "agentgrpo.json").is_file():
        print(f"SFT: training sft.yaml's SFT into {out / 'sft'}", flush=True)
        train_sft(load_config(SFTConfig, [f"run_dir={out / 'sft'}", "progress=false"], defaults="sft.yaml"))
    return final


def decoding_settings(overrides: list[str]) -> list[str]:
    """The ``rollout.*`` settings among ``overrides``: how the agent decodes, in training and in
    every pool evaluation alike (temperature, turn budget, ``rollout.constrain_tool_calls`` ...)."""
    return [o for o in overrides if o.startswith("rollout.")]


def evaluate_pool(policy: Path, out_dir: Path, trials: int, decoding: list[str]) -> dict[str, Any]:
    """Sampled pass^1 of ``policy`` on the pool, decoded with ``decoding`` (``rollout.*`` overrides).

    Kept when already done (the runs are resumable), unless it decoded otherwise: an evaluation
    under other rollout settings is not paired with this one, so that is an error, not a reuse."""
    config = load_config(EvalConfig, [
        f"policy.init={policy}", f"out_dir={out_dir}", f"trials={trials}", f"seed={EVAL_SEED}",
        f"splits=[{','.join(POOL_SPLITS)}]", "progress=false", *decoding,
    ], defaults="eval.yaml")
    if (out_dir / "eval.json").is_file():
        report = load_eval(out_dir)
        ran = report.get("provenance", {}).get("config", {}).get("rollout")
        differ = {} if ran is None else differing_keys(
            {"rollout": ran}, {"rollout": to_dict(config.rollout)}, defaults={"rollout": to_dict(RolloutConfig())})
        if differ:
            listed = ", ".join(f"{key}={old} (now {new})" for key, (old, new) in differ.items())
            raise SystemExit(f"{out_dir} was evaluated with {listed}; give another --out for these settings")
        return report
    evaluate(config)
    return load_eval(out_dir)


def seed_list(text: str) -> list[int]:
    """``--seeds``: comma-separated non-negative integers, at least one."""
    try:
        seeds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        seeds = []
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"{text!r}: give distinct non-negative integers, e.g. 0,1,2")
    return seeds


def run_name(experiment: str, seed: int) -> str:
    """A run's directory name: the experiment for seed 0 (the layout of one-seed benchmarks), with
    ``-seed<N>`` after it for the others."""
    return experiment if seed == 0 else f"{experiment}-seed{seed}"


def family_pass1(after: dict[int, dict[str, Any]], before: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each family's pass^1 (``split/family``) before and after, the after averaged over seeds."""
    def by_family(report: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
        groups: dict[str, list[dict[str, Any]]] = {}
        for row in report["per_task"]:
            groups.setdefault(f"{row['split']}/{row['family']}", []).append(row)
        return groups

    def mean(rows: list[dict[str, Any]]) -> float:
        return sum(task_pass1(r) for r in rows) / len(rows)

    families = by_family(before)
    afters = [by_family(report) for report in after.values()]
    return {name: {"before": mean(rows), "after": sum(mean(a[name]) for a in afters) / len(afters),
                   "write": bool(rows[0].get("write")), "tasks": len(rows)}
            for name, rows in sorted(families.items())}


def pool_pass1(reports: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Pool pass^1 averaged over seeds, its 95% interval with seeds and tasks random, per seed."""
    seeds = sorted(reports)
    ids = [r["task_id"] for r in reports[seeds[0]]["per_task"]]
    by_id = {s: {r["task_id"]: r for r in reports[s]["per_task"]} for s in seeds}
    table = [[task_pass1(by_id[s][t]) for t in ids] for s in seeds]
    return {**hierarchical_bootstrap(table).to_dict(),
            "per_seed": {str(s): sum(row) / len(row) for s, row in zip(seeds, table)}}


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def train(experiment: str, sft: Path, run_dir: Path, steps: int, checks: list[int], seed: int,
          extra: list[str]) -> dict[int, Path]:
    """GRPO from ``sft``; returns the model directory of each checkpoint step in ``checks``."""
    save_every = min(checks) if checks else steps
    overrides = [f"experiment={experiment}", f"seed={seed}", f"run_dir={run_dir}", f"policy.init={sft}",
                 f"trainer.steps={steps}", f"trainer.save_every={save_every}", f"trainer.keep_last={steps}",
                 *LEARNING_SETTINGS, *extra]
    config = load_config(GRPOConfig, overrides, defaults="grpo.yaml")
    final_marker = run_dir / "final" / "agentgrpo.json"
    if not final_marker.is_file():
        resume = (run_dir / "checkpoints").is_dir()
        train_grpo(config, resume=resume)
    models = {}
    for step in checks:
        model = run_dir / "checkpoints" / f"step_{step:06d}" / "model"
        models[step] = model if model.is_dir() else run_dir / "final"
    return models


def group_shares(runs: list[list[dict[str, Any]]], tasks_per_step: int) -> list[dict[str, float]]:
    """Per step, averaged over the runs (seeds) that reached it: the share of sampled groups with
    mixed outcomes (what a run without dynamic sampling trains on, in expectation) and the share
    of the step's ``tasks_per_step`` group slots that dynamic sampling filled with such groups."""
    by_step: dict[int, list[dict[str, float]]] = {}
    for metrics in runs:
        for i, m in enumerate(metrics):
            by_step.setdefault(int(m.get("step", i + 1)), []).append({
                "sampled": float(m.get("rollout/informative_group_frac", float("nan"))),
                "trained": float(m.get("rollout/informative_groups", float("nan"))) / tasks_per_step,
                "rounds": float(m.get("rollout/generation_rounds", 1.0)),
                "outcome_mean": float(m.get("reward/outcome_mean", float("nan")))})
    return [{"step": step, **{k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}}
            for step, rows in sorted(by_step.items())]


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_curve, ax_groups) = plt.subplots(1, 2, figsize=(11, 4))
    for name, res in results["experiments"].items():
        steps = [0, *res["checks"]]
        points = [results["before"]] + [res["curve"][str(s)] for s in res["checks"]]
        values = [p["value"] for p in points]
        ax_curve.errorbar(steps, values, yerr=[[v - p["low"] for v, p in zip(values, points)],
                                               [p["high"] - v for v, p in zip(values, points)]],
                          marker="o", capsize=3, label=name)
        shares = res["groups"]
        steps = [r["step"] for r in shares]
        ax_groups.plot(steps, [r["sampled"] for r in shares], "--", label=f"{name}: sampled")
        ax_groups.plot(steps, [r["trained"] for r in shares], "-", label=f"{name}: trained slots filled")
    ax_curve.set(xlabel="GRPO step", ylabel="pool pass^1 (sampled, 95% CI)", title="training-task pool")
    ax_groups.set(xlabel="GRPO step", ylabel="informative groups (mean over seeds)", ylim=(-0.05, 1.05),
                  title="groups with mixed outcomes")
    ax_curve.legend()
    ax_groups.legend(fontsize=7)
    save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/bench/learning")
    parser.add_argument("--sft", help="SFT checkpoint (default: train sft.yaml's once into OUT/sft)")
    parser.add_argument("--experiments", default="vanilla,joint")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--checks", default=None, help="checkpoint steps evaluated (default: steps/2,steps)")
    parser.add_argument("--trials", type=int, default=16, help="samples per pool task per evaluation")
    parser.add_argument("--seeds", default=[0], type=seed_list, help="GRPO seeds of every experiment, comma-separated "
                        "(each trains its own run from the one SFT; intervals treat seeds as random)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("overrides", nargs="*", help="GRPO overrides applied to every experiment (key=value)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    checks = ([int(s) for s in args.checks.split(",")] if args.checks
              else sorted({max(1, args.steps // 2), args.steps}))
    sft = sft_checkpoint(out, args.sft)
    print(f"SFT: {sft}", flush=True)
    before_dir = out / "eval_sft"
    decoding = decoding_settings([*LEARNING_SETTINGS, *args.overrides])
    before = evaluate_pool(sft, before_dir, args.trials, decoding)
    seeds = args.seeds
    results: dict[str, Any] = {
        "sft": str(sft), "trials": args.trials, "temperature": before["temperature"], "eval_seed": EVAL_SEED,
        "pool_splits": POOL_SPLITS, "settings": [*LEARNING_SETTINGS, *args.overrides], "steps": args.steps,
        "seeds": seeds, "before": _pass1(before), "experiments": {},
    }
    print(f"before: pool pass^1 {results['before']['value']:.3f}", flush=True)
    for experiment in [e for e in args.experiments.split(",") if e]:
        clock = time.perf_counter()
        evals: dict[int, dict[int, dict[str, Any]]] = {}  # step -> seed -> eval.json
        for seed in seeds:
            name = run_name(experiment, seed)
            # checkpoints evaluated by an earlier invocation (another --checks) stay on the curve
            done = {int(d.name.rsplit("step", 1)[1]) for d in out.glob(f"eval_{name}_step*")
                    if (d / "eval.json").is_file()}
            models = train(experiment, sft, out / name, args.steps, sorted(set(checks) | done), seed, args.overrides)
            for step, model in models.items():
                evals.setdefault(step, {})[seed] = evaluate_pool(model, out / f"eval_{name}_step{step}",
                                                                 args.trials, decoding)
        train_s = time.perf_counter() - clock
        last = max(checks)
        delta = seed_aware_delta(evals[last], {0: before}, {seed: 0 for seed in seeds})
        results["experiments"][experiment] = {
            "checks": sorted(evals), "curve": {str(step): pool_pass1(e) for step, e in sorted(evals.items())},
            "train_seconds": train_s, "after_minus_before": delta["figures"], "mde": delta["mde"],
            "families": family_pass1(evals[last], before),
            "groups": group_shares([read_metrics(out / run_name(experiment, s)) for s in seeds], TASKS_PER_STEP),
        }
        write = delta["figures"].get("write")
        summary = (f"write-task pass^1 after − before {Estimate.from_dict(write['estimate']).format(signed=True)}"
                   if write else "no write task in the pool")
        print(f"{experiment}: {summary} (train and evaluate {train_s / 60:.1f} min)", flush=True)
    results["wall_seconds"] = time.perf_counter() - start
    # the benchmark's own cost, whichever invocations did the work: every evaluation's wall time
    # and every GRPO step's (an interrupted or resumed benchmark counts each part once)
    runs = {run_name(name, seed): res["checks"] for name, res in results["experiments"].items() for seed in seeds}
    evaluations = [out / f"eval_{run}_step{step}" for run, steps in runs.items() for step in steps]
    results["cost_seconds"] = (load_eval(before_dir)["wall_seconds"]
                               + sum(load_eval(d)["wall_seconds"] for d in evaluations)
                               + sum(m.get("perf/step_s", 0.0) for run in runs for m in read_metrics(out / run)))
    (out / "learning.json").write_text(json.dumps(results, indent=2))
    plot(results, out / "learning.png")
    (out / "learning.md").write_text(markdown(results))
    print(markdown(results))
    for name, res in results["experiments"].items():
        figures = res["after_minus_before"]
        for figure, target in (("overall", "info"), ("family", "info")):
            if figure in figures:
                bench(f"learning_{name}_{figure}_after_minus_before", figures[figure]["estimate"]["value"], target)
        if "write" in figures:
            write = figures["write"]["estimate"]
            bench(f"learning_{name}_write_after_minus_before", write["value"], "> 0")
            bench(f"learning_{name}_write_ci_low", write["low"], "> 0")
        if "no_write" in figures:
            bench(f"learning_{name}_no_write_ci_low", figures["no_write"]["estimate"]["low"],
                  f">= -{NON_INFERIORITY}")
        shares = res["groups"]
        if shares:
            bench(f"learning_{name}_sampled_informative_frac",
                  sum(r["sampled"] for r in shares) / len(shares), "info")
            bench(f"learning_{name}_trained_informative_frac", sum(r["trained"] for r in shares) / len(shares),
                  "info")
    bench("learning_cost_min", results["cost_seconds"] / 60, "<= 60")


def _pass1(report: dict[str, Any]) -> dict[str, float]:
    """Overall pass^1 with its interval from an eval.json."""
    return dict(report["metrics"]["ci"]["pass^k"]["1"])


def markdown(results: dict[str, Any]) -> str:
    lines = [f"Pool: {results['pool_splits']} ({results['trials']} samples per task at T = "
             f"{results['temperature']}, user seeds from {results['eval_seed']}); SFT pass^1 "
             f"{results['before']['value']:.3f} [{results['before']['low']:.3f}, {results['before']['high']:.3f}]; "
             f"GRPO seeds {', '.join(map(str, results['seeds']))}, each from the same SFT.",
             "", "| experiment | step | pool pass^1 [95% CI] | per seed |", "|---|---|---|---|"]
    for name, res in results["experiments"].items():
        for step in res["checks"]:
            p = res["curve"][str(step)]
            per_seed = ", ".join(f"{v:.3f}" for v in p["per_seed"].values())
            lines.append(f"| {name} | {step} | {p['value']:.3f} [{p['low']:.3f}, {p['high']:.3f}] | {per_seed} |")
    lines += ["", "After − before, 95% interval with seeds and tasks random (tasks resampled within families):",
              "", "| experiment | figure | after − before [95% CI] | per seed |", "|---|---|---|---|"]
    for name, res in results["experiments"].items():
        for figure in FIGURES:
            if figure in res["after_minus_before"]:
                e = res["after_minus_before"][figure]["estimate"]
                per_seed = ", ".join(f"{v:+.3f}" for v in res["after_minus_before"][figure]["per_seed"].values())
                lines.append(f"| {name} | {FIGURE_LABELS[figure]} | {e['value']:+.3f} [{e['low']:+.3f}, "
                             f"{e['high']:+.3f}] | {per_seed} |")
    lines += ["", "| family (split/family, w = writes) | SFT | " + " | ".join(results["experiments"]) + " |",
              "|---|---|" + "---|" * len(results["experiments"])]
    first = next(iter(results["experiments"].values()), None)
    for family, row in (first["families"].items() if first else []):
        cells = [f"{res['families'][family]['after']:.2f}" for res in results["experiments"].values()]
        lines.append(f"| {family}{' (w)' if row['write'] else ''} | {row['before']:.2f} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    try:
        main()
    except AgentGRPOError as error:  # a bad override or checkpoint: one line, as the CLI reports it
        sys.exit(f"learning.py: {one_line(error)}")
