"""GRPO's shared forwards: the log-prob passes the trainer skips, exact, and the time they save.

Before its updates a GRPO step scores the batch twice without gradients: the old log-probs
(the policy) and the reference's (the KL term). Two of those passes repeat values another
forward gives anyway (``GRPOTrainer.share_forwards``):

- the first mini-batch's old log-probs are what its own update forward computes (same weights,
  same micro-batches), so they are taken from it;
- until the policy's first optimizer step its weights are the reference's, so on the first
  step the reference's log-probs are the policy's.

Two trainers with the same settings run side by side, step by step (so both see the same
machine): one with every pass (the baseline), one sharing. Their rollouts, batches, metrics
and final weights must be identical bit for bit; the time saved is read from the steps'
``perf/`` phases (old log-probs + update; the rollout is reported for the share of a step).

Default settings: the ``cpu`` ablation preset's GRPO stage (``configs/ablate/cpu.yaml``),
experiment ``joint``, from ``--policy`` (that preset's SFT checkpoint: ``runs/ablation-cpu/
sft/seed0/final`` after a grid; default: the benchmarks' short SFT policy).

Run: ``python benchmarks/shared_forwards.py [--policy DIR] [--steps 2] [--quick]`` (about 6
minutes on 2 cores of a recent Xeon for the cpu preset's 2 steps × 2 trainers). Ends with
BENCH lines.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _common import (
    add_grpo_preset_arguments,
    bench,
    grpo_preset_overrides,
    policy_dir,
    same_batches,
    same_metrics,
    same_weights,
    set_threads,
    world,
)

from agentgrpo import metric_names as metric
from agentgrpo.config import load_config
from agentgrpo.train.grpo import GRPOTrainer
from agentgrpo.train.grpo_config import GRPOConfig

LEARN_SPEEDUP_TARGET = 1.15
"""Old log-probs + update, baseline ÷ shared, over the first two steps. By pass count: step 1
runs old 1 + reference 1 + update 3 forward-equivalents against 0.5 + 0 + 3, step 2 2 + 3
against 1.5 + 3: 10 against 8, 1.25, less what the passes do not save (batch assembly,
the optimizer step)."""

def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_grpo_preset_arguments(parser, "joint", 2, "steps per trainer (the first shares the most)")
    return parser.parse_args()


def make_trainer(overrides: list[str], share: bool) -> GRPOTrainer:
    trainer = GRPOTrainer(load_config(GRPOConfig, overrides, defaults="grpo.yaml"))
    trainer.share_forwards = share
    return trainer


def main() -> None:
    args = parse_args()
    set_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="bench-shared-") as workdir:
        checkpoint = policy_dir(world(), workdir, args.policy, args.seed, args.policy_cache, args.quick)
        base = [*grpo_preset_overrides(args, checkpoint), f"experiment={args.experiment}"]
        trainers = {share: make_trainer([*base, f"run_dir={Path(workdir) / str(share)}"], share)
                    for share in (False, True)}
        seconds = {share: {"rollout": 0.0, "learn": 0.0} for share in trainers}
        same = True
        for step in range(args.steps):
            metrics = {share: trainer.step(step) for share, trainer in trainers.items()}
            for share, m in metrics.items():
                seconds[share]["rollout"] += m[metric.PERF_ROLLOUT_S]
                seconds[share]["learn"] += m.get(metric.PERF_OLD_LOGPROB_S, 0.0) + m.get(metric.PERF_UPDATE_S, 0.0)
                print(f"step {step + 1} {'shared' if share else 'apart '}: rollout {m[metric.PERF_ROLLOUT_S]:.1f} s, "
                      f"old log-probs {m.get(metric.PERF_OLD_LOGPROB_S, 0.0):.1f} s, "
                      f"update {m.get(metric.PERF_UPDATE_S, 0.0):.1f} s", flush=True)
            same &= same_metrics(metrics[False], metrics[True])
            same &= same_batches(trainers[False].last_batch, trainers[True].last_batch)
        same &= same_weights(trainers[False].model, trainers[True].model)
    learn_speedup = seconds[False]["learn"] / seconds[True]["learn"]
    step_apart = seconds[False]["rollout"] + seconds[False]["learn"]
    saving = (seconds[False]["learn"] - seconds[True]["learn"]) / step_apart
    print(f"\n{args.steps} steps of {args.preset}/{args.experiment}: learning {seconds[False]['learn']:.1f} s "
          f"apart, {seconds[True]['learn']:.1f} s shared; rollouts {seconds[False]['rollout']:.1f} s "
          f"and {seconds[True]['rollout']:.1f} s; saved {saving:.1%} of the steps")
    bench("shared_forwards_same_results", int(same), "== 1")
    bench("shared_forwards_learn_seconds_apart", seconds[False]["learn"])
    bench("shared_forwards_learn_seconds_shared", seconds[True]["learn"])
    bench("shared_forwards_step_saving_frac", saving)
    bench("shared_forwards_learn_speedup", learn_speedup, f">= {LEARN_SPEEDUP_TARGET}")


if __name__ == "__main__":
    main()
