"""How does each part of a GRPO step move the policy's correct write calls?

GRPO trades writes for refusals on the learning benchmark's pool. This measures why, at the policy
the benchmark starts from: it samples the trainer's own groups (the benchmark's settings: frontier
sampler, dynamic sampling, T = 0.7, ``LEARNING_SETTINGS``) for ``--rounds`` steps' worth of kept
groups, splits that batch's gradient into the part of the tasks that need a write and the part of
those that need none (``agentgrpo.diagnose.interference``), and measures both against probes: the first
write call of every successful write episode of ``--probe-rounds`` further steps' sampling (other
episodes than the batch's). Per part, over the probes (95% bootstrap intervals): the first-order
change of a probe's log-likelihood per unit step along the part, the cosine of the two directions,
and the exact change after the trainer's optimizer takes one fresh step on the part alone.

    python benchmarks/write_interference.py --sft runs/learn/sft/final --out runs/interference
    python benchmarks/write_interference.py --sft runs/learn/sft/final --out runs/interference-kind-ev \\
        rollout.constrain_tool_calls=true rollout.copy_arguments=true rollout.copy_by_kind=true \\
        rollout.copy_from_evidence=true trainer.lr=3e-5

Writes ``interference.json`` and ``interference.md`` into ``--out``; ends with BENCH lines: the mean
change of the probes after one step on the no-write part (target ≥ 0: refusing should not cost the
correct writes) and on the write part (target > 0).
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

from agentgrpo import metric_names as metric  # noqa: E402
from agentgrpo.cli import one_line  # noqa: E402
from agentgrpo.config import AgentGRPOError, load_config  # noqa: E402
from agentgrpo.diagnose.interference import PARTS, Attribution, attribute, first_write_probe  # noqa: E402
from agentgrpo.eval.stats import Estimate  # noqa: E402
from agentgrpo.train.grpo import GRPOTrainer  # noqa: E402
from agentgrpo.train.grpo_config import GRPOConfig  # noqa: E402
from agentgrpo.train.task_sampler import is_write_task  # noqa: E402
from benchmarks._common import bench  # noqa: E402
from benchmarks.learning import LEARNING_SETTINGS, sft_checkpoint  # noqa: E402

MEASURES = {"adam": "one optimizer step on the part alone: Δ log-lik. (nats)",
            "first_order": "first order, per unit step along the part: −⟨g, ∇ℓ⟩",
            "cosine": "cosine of −g and ∇ℓ"}


def sample(trainer: GRPOTrainer, rounds: range) -> tuple[list, list]:
    """The kept (trained) and all sampled episodes of ``rounds`` steps of the trainer's sampling."""
    kept, sampled = [], []
    for step in rounds:
        timings = {metric.PERF_ROLLOUT_S: 0.0, metric.PERF_SCORE_S: 0.0}
        groups = trainer.groups.sample(step, timings, policy_is_init=True)
        kept += groups.kept
        sampled += groups.sampled
        print(f"step {step + 1}: {len(groups.kept)} kept of {len(groups.sampled)} episodes", flush=True)
    return kept, sampled


def measure(policy: Path, out: Path, experiment: str, rounds: int, probe_rounds: int, seed: int,
            overrides: list[str]) -> dict[str, Any]:
    config = load_config(GRPOConfig, [f"experiment={experiment}", f"seed={seed}", f"run_dir={out / 'run'}",
                                      f"policy.init={policy}", "logging.progress=false", *LEARNING_SETTINGS,
                                      *overrides], defaults="grpo.yaml")
    trainer = GRPOTrainer(config)
    tools = trainer.groups.write_tools
    write_ids = {t.task_id for t in trainer.groups.train_tasks if is_write_task(t, tools)}
    kept, _ = sample(trainer, range(rounds))
    _, probe_pool = sample(trainer, range(rounds, rounds + probe_rounds))
    probes = [p for t in probe_pool if t.outcome_reward == 1.0 and t.task_id in write_ids
              for p in [first_write_probe(t, tools)] if p is not None]
    if not kept:
        raise SystemExit("no informative group was sampled: nothing to attribute; give more --rounds")
    print(f"batch: {len(kept)} episodes; probes: {len(probes)} successful write episodes", flush=True)
    report = attribute(trainer, kept, write_ids, probes)
    return {"policy": str(policy), "experiment": experiment, "seed": seed, "rounds": rounds,
            "probe_rounds": probe_rounds, "settings": [*LEARNING_SETTINGS, *overrides],
            "lr": config.trainer.lr, "probe_tasks": sorted(set(report.probe_tasks)),
            **report.summary(), "per_probe": per_probe(report)}


def per_probe(report: Attribution) -> list[dict[str, Any]]:
    return [{"task_id": task, **{f"{m}/{part}": getattr(report, m)[part][i] for m in MEASURES for part in PARTS}}
            for i, task in enumerate(report.probe_tasks)]


def markdown(result: dict[str, Any]) -> str:
    lines = [f"# Write interference: `{result['policy']}` ({result['experiment']}, lr {result['lr']:g})", "",
             f"Batch: {result['rows']['all']} episodes of kept groups ({result['rows']['write']} of write tasks, "
             f"{result['rows']['no_write']} of the others), {result['rounds']} steps' sampling. Probes: the first "
             f"write call of {result['probes']} successful write episodes of {result['probe_rounds']} further "
             f"steps ({len(result['probe_tasks'])} tasks). The parts' gradients add up to the batch's within "
             f"{result['additivity_error']:.1e}.", "",
             "| measure | part | mean over probes [95% CI] | probes lowered |", "|---|---|---|---|"]
    for name, title in MEASURES.items():
        for part, row in result[name].items():
            estimate = Estimate.from_dict(row["mean"])
            lines.append(f"| {title} | {part} | {estimate.format(signed=True)} | {row['lowered_frac']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/bench/interference")
    parser.add_argument("--sft", help="the policy measured (default: the learning benchmark's SFT, trained once "
                        "into OUT/sft)")
    parser.add_argument("--experiment", default="joint")
    parser.add_argument("--rounds", type=int, default=4, help="steps of sampling whose kept groups form the batch")
    parser.add_argument("--probe-rounds", type=int, default=6, help="further steps of sampling the probes come from")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("overrides", nargs="*", help="GRPO overrides (key=value)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        policy = sft_checkpoint(out, args.sft)
        result = measure(policy, out, args.experiment, args.rounds, args.probe_rounds, args.seed, args.overrides)
    except (AgentGRPOError, ValueError) as error:
        raise SystemExit(f"write_interference.py: {one_line(error)}") from None
    result["wall_seconds"] = time.perf_counter() - start
    (out / "interference.json").write_text(json.dumps(result, indent=2))
    (out / "interference.md").write_text(markdown(result))
    print(markdown(result))
    print(f"written to {out}/ (interference.json, interference.md) in {result['wall_seconds'] / 60:.1f} min")
    bench("interference_no_write_step_first_write_delta", result["adam"]["no_write"]["mean"]["value"], ">= 0")
    bench("interference_write_step_first_write_delta", result["adam"]["write"]["mean"]["value"], "> 0")
    bench("interference_no_write_lowered_frac", result["adam"]["no_write"]["lowered_frac"], "info")


if __name__ == "__main__":
    main()
