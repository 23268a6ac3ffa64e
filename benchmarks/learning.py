"""Does GRPO make the airline agent better at its training tasks? Before/after, paired, with CIs.

Starts from the quickstart's SFT checkpoint (``agentgrpo sft`` with the packaged ``sft.yaml``;
trained once into ``--out``/sft unless ``--sft DIR``), measures *sampled* success on a fixed
pool of training tasks (the env's covered_seen + uncovered_seen: 40 tasks) at the rollout
temperature with ``--trials`` samples per task, trains each experiment with the mechanisms that
make groups carry signal (frontier task sampler, dynamic sampling, no AdamW step on a zero
gradient), and measures the pool again at a few checkpoints. The evaluation's user seeds come
from ``EVAL_SEED``, a stream no training rollout uses (training derives its user seeds from
``(seed, step, task, sample)``), so no evaluation reuses a sample that chose a task; every
checkpoint is evaluated on the same tasks, trials and user seeds, so differences are paired.

Reports, per experiment: pool pass^1 at each checkpoint (the learning curve, with 95% bootstrap
intervals over tasks), the paired difference after − before with its 95% paired-bootstrap
interval over tasks (overall, per split, write tasks), and the share of informative groups per
step (the first generation round's, i.e. what training without dynamic sampling would have had,
and the trained batch's). Writes ``learning.json``, ``learning.md`` and ``learning.png`` into
``--out``; ends with BENCH lines.

    python benchmarks/learning.py                      # vanilla and joint, ~60 min on 2 cores
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

from agentgrpo.config import load_config  # noqa: E402
from agentgrpo.eval.compare import compare_evals, load_eval, paired_rows  # noqa: E402
from agentgrpo.eval.evaluator import EvalConfig, evaluate  # noqa: E402
from agentgrpo.eval.stats import paired_difference  # noqa: E402
from agentgrpo.eval.summary import task_pass1  # noqa: E402
from agentgrpo.report.plots import save_figure  # noqa: E402
from agentgrpo.train.grpo import train_grpo  # noqa: E402
from agentgrpo.train.grpo_config import GRPOConfig  # noqa: E402
from agentgrpo.train.sft import train_sft  # noqa: E402
from agentgrpo.train.sft_config import SFTConfig  # noqa: E402
from benchmarks._common import bench  # noqa: E402

EVAL_SEED = 7_001
"""Seed of the evaluation's user simulators and sampling: no training or screening run uses it."""
POOL_SPLITS = ["covered_seen", "uncovered_seen"]
"""The fixed pool: every training task of the env's default splits (16 + 24)."""

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
    """The quickstart's SFT checkpoint: ``given``, or trained once into ``out/sft``."""
    if given:
        return Path(given)
    final = out / "sft" / "final"
    if not (final / "agentgrpo.json").is_file():
        print(f"SFT: training the quickstart's SFT into {out / 'sft'} (sft.yaml)", flush=True)
        train_sft(load_config(SFTConfig, [f"run_dir={out / 'sft'}", "progress=false"], defaults="sft.yaml"))
    return final


def evaluate_pool(policy: Path, out_dir: Path, trials: int, temperature: float) -> dict[str, Any]:
    """Sampled pass^1 of ``policy`` on the pool (kept when already done: the runs are resumable)."""
    if (out_dir / "eval.json").is_file():
        return load_eval(out_dir)
    config = load_config(EvalConfig, [
        f"policy.init={policy}", f"out_dir={out_dir}", f"trials={trials}", f"seed={EVAL_SEED}",
        f"splits=[{','.join(POOL_SPLITS)}]", f"rollout.temperature={temperature}", "progress=false",
    ], defaults="eval.yaml")
    evaluate(config)
    return load_eval(out_dir)


def behaviour_split(after_dir: Path, before_dir: Path) -> dict[str, Any]:
    """Where the change comes from: after − before on tasks whose gold actions write to the
    database and on those that only read or refuse (the do-nothing answer is right there), and
    each family's pass^1 before and after."""
    rows_a, rows_b = paired_rows(load_eval(after_dir), load_eval(before_dir))
    pa = {t: task_pass1(r) for t, r in rows_a.items()}
    pb = {t: task_pass1(r) for t, r in rows_b.items()}
    no_write = [t for t, r in rows_a.items() if not r.get("write")]
    families: dict[str, list[str]] = {}
    for task_id, row in rows_a.items():
        families.setdefault(f"{row['split']}/{row['family']}", []).append(task_id)
    return {
        "no_write": paired_difference({t: pa[t] for t in no_write}, {t: pb[t] for t in no_write}).to_dict(),
        "no_write_tasks": len(no_write),
        "families": {name: {"before": sum(pb[t] for t in ids) / len(ids), "after": sum(pa[t] for t in ids) / len(ids),
                            "write": bool(rows_a[ids[0]].get("write")), "tasks": len(ids)}
                     for name, ids in sorted(families.items())},
    }


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


def group_shares(metrics: list[dict[str, Any]], tasks_per_step: int) -> list[dict[str, float]]:
    """Per step: the share of sampled groups with mixed outcomes (what a run without dynamic
    sampling trains on, in expectation) and the share of the step's ``tasks_per_step`` group slots
    that dynamic sampling filled with such groups."""
    rows = []
    for m in metrics:
        rows.append({"step": m.get("step", len(rows) + 1),
                     "sampled": float(m.get("rollout/informative_group_frac", float("nan"))),
                     "trained": float(m.get("rollout/informative_groups", float("nan"))) / tasks_per_step,
                     "rounds": float(m.get("rollout/generation_rounds", 1.0)),
                     "outcome_mean": float(m.get("reward/outcome_mean", float("nan")))})
    return rows


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
    ax_groups.set(xlabel="GRPO step", ylabel="informative groups", ylim=(-0.05, 1.05),
                  title="groups with mixed outcomes")
    ax_curve.legend()
    ax_groups.legend(fontsize=7)
    save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/bench/learning")
    parser.add_argument("--sft", help="SFT checkpoint (default: train the quickstart's SFT once into OUT/sft)")
    parser.add_argument("--experiments", default="vanilla,joint")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--checks", default=None, help="checkpoint steps evaluated (default: steps/2,steps)")
    parser.add_argument("--trials", type=int, default=16, help="samples per pool task per evaluation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("overrides", nargs="*", help="GRPO overrides applied to every experiment (key=value)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    checks = ([int(s) for s in args.checks.split(",")] if args.checks
              else sorted({max(1, args.steps // 2), args.steps}))
    temperature = float(next((o.split("=", 1)[1] for o in [*LEARNING_SETTINGS, *args.overrides]
                              if o.startswith("rollout.temperature=")), 0.7))
    sft = sft_checkpoint(out, args.sft)
    print(f"SFT: {sft}", flush=True)
    before_dir = out / "eval_sft"
    before = evaluate_pool(sft, before_dir, args.trials, temperature)
    results: dict[str, Any] = {
        "sft": str(sft), "trials": args.trials, "temperature": temperature, "eval_seed": EVAL_SEED,
        "pool_splits": POOL_SPLITS, "settings": [*LEARNING_SETTINGS, *args.overrides], "steps": args.steps,
        "before": _pass1(before), "experiments": {},
    }
    print(f"before: pool pass^1 {results['before']['value']:.3f}", flush=True)
    for experiment in [e for e in args.experiments.split(",") if e]:
        run_dir = out / experiment
        clock = time.perf_counter()
        # checkpoints evaluated by an earlier invocation (another --checks) stay on the curve
        done = {int(d.name.rsplit("step", 1)[1]) for d in out.glob(f"eval_{experiment}_step*")
                if (d / "eval.json").is_file()}
        models = train(experiment, sft, run_dir, args.steps, sorted(set(checks) | done), args.seed, args.overrides)
        train_s = time.perf_counter() - clock
        curve, comparisons = {}, {}
        for step, model in models.items():
            eval_dir = out / f"eval_{experiment}_step{step}"
            curve[str(step)] = _pass1(evaluate_pool(model, eval_dir, args.trials, temperature))
            comparisons[str(step)] = compare_evals(eval_dir, before_dir, names=(f"{experiment}@{step}", "SFT"))
        last = comparisons[str(max(checks))]
        results["experiments"][experiment] = {
            "checks": sorted(models), "curve": curve, "train_seconds": train_s,
            "after_minus_before": {k: v.to_dict() for k, v in last.estimates().items()},
            "behaviour": behaviour_split(out / f"eval_{experiment}_step{max(checks)}", before_dir),
            "groups": group_shares(read_metrics(run_dir), TASKS_PER_STEP),
        }
        print(f"{experiment}: after − before {last.overall.format(signed=True)} "
              f"(train {train_s / 60:.1f} min)", flush=True)
    results["wall_seconds"] = time.perf_counter() - start
    # the benchmark's own cost, whichever invocations did the work: every evaluation's wall time
    # and every GRPO step's (an interrupted or resumed benchmark counts each part once)
    results["cost_seconds"] = load_eval(before_dir)["wall_seconds"] + sum(
        load_eval(out / f"eval_{name}_step{step}")["wall_seconds"] + 0.0
        for name, res in results["experiments"].items() for step in res["checks"]) + sum(
        m.get("perf/step_s", 0.0) for name in results["experiments"] for m in read_metrics(out / name))
    (out / "learning.json").write_text(json.dumps(results, indent=2))
    plot(results, out / "learning.png")
    (out / "learning.md").write_text(markdown(results))
    print(markdown(results))
    for name, res in results["experiments"].items():
        diff = res["after_minus_before"]["overall"]
        bench(f"learning_{name}_after_minus_before", diff["value"], "> 0")
        bench(f"learning_{name}_ci_low", diff["low"], "> 0")
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
             f"{results['before']['value']:.3f} [{results['before']['low']:.3f}, {results['before']['high']:.3f}].",
             "", "| experiment | step | pool pass^1 [95% CI] |", "|---|---|---|"]
    for name, res in results["experiments"].items():
        for step in res["checks"]:
            p = res["curve"][str(step)]
            lines.append(f"| {name} | {step} | {p['value']:.3f} [{p['low']:.3f}, {p['high']:.3f}] |")
    lines += ["", "| experiment | figure | after − before [95% paired CI] |", "|---|---|---|"]
    for name, res in results["experiments"].items():
        for key, e in res["after_minus_before"].items():
            lines.append(f"| {name} | {key} | {e['value']:+.3f} [{e['low']:+.3f}, {e['high']:+.3f}] |")
        e = res["behaviour"]["no_write"]
        lines.append(f"| {name} | no-write tasks | {e['value']:+.3f} [{e['low']:+.3f}, {e['high']:+.3f}] |")
    lines += ["", "| family (split/family, w = writes) | SFT | " + " | ".join(results["experiments"]) + " |",
              "|---|---|" + "---|" * len(results["experiments"])]
    first = next(iter(results["experiments"].values()), None)
    for family, row in (first["behaviour"]["families"].items() if first else []):
        cells = [f"{res['behaviour']['families'][family]['after']:.2f}" for res in results["experiments"].values()]
        lines.append(f"| {family}{' (w)' if row['write'] else ''} | {row['before']:.2f} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
