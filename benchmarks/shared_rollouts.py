"""Shared first rollouts: what a run saves by reading another variant's first episodes, exact.

Before its first optimizer step every variant of an ablation seed samples the same episodes
(same policy, seeds, env and rollout settings), so ``agentgrpo ablate`` lets them share those
rollouts (``trainer.shared_rollouts_dir``): the first run of a seed samples and stores them,
the others read them. This runs the preset's GRPO stage three times from one policy:

- the *sampler* (``--sampler``, another variant) samples the first step's rounds into the
  directory (its rollout phase only: that is all a reader needs of it);
- the *reader* (``--experiment``) trains ``--steps`` steps reading them;
- the same variant *alone* trains the same steps sampling everything itself.

Reader and alone run side by side, step by step (so both see the same machine), and must log
the same metrics and train on the same batches to the same weights, bit for bit. The time
saved is the reader's; the share of a whole run needs ``--steps`` = the preset's steps (3).

Default settings: the ``cpu`` ablation preset's GRPO stage, reader ``vanilla``, sampler
``joint``, from ``--policy`` (default: the benchmarks' short SFT policy).

Run: ``python benchmarks/shared_rollouts.py [--policy DIR] [--steps 3] [--quick]``. Ends with
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

FIRST_STEP_SPEEDUP_TARGET = 1.3
"""Alone ÷ reader seconds of the first step. The first step's rollouts (every generation round)
were about 40% of it on the ``cpu`` preset (benchmarks/shared_forwards.py: rollout 82 s, old
log-probs 15 s, update 101 s), so reading them should make it about 1.7× quicker."""

def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_grpo_preset_arguments(parser, "vanilla", 1, "steps of reader and alone (the preset's: 3)")
    parser.add_argument("--sampler", default="joint", help="the variant that samples the shared rollouts")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    set_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="bench-shared-rollouts-") as workdir:
        checkpoint = policy_dir(world(), workdir, args.policy, args.seed, args.policy_cache, args.quick)
        base = grpo_preset_overrides(args, checkpoint)
        shared = f"trainer.shared_rollouts_dir={Path(workdir) / 'shared'}"

        def trainer(name: str, experiment: str, *extra: str) -> GRPOTrainer:
            overrides = [*base, f"experiment={experiment}", f"run_dir={Path(workdir) / name}", *extra]
            return GRPOTrainer(load_config(GRPOConfig, overrides, defaults="grpo.yaml"))

        phases = {metric.PERF_ROLLOUT_S: 0.0, metric.PERF_SCORE_S: 0.0}
        trainer("sampler", args.sampler, shared).groups.sample(0, phases, policy_is_init=True)
        print(f"sampler ({args.sampler}): first step's rollouts sampled and stored in "
              f"{phases[metric.PERF_ROLLOUT_S]:.1f} s", flush=True)
        runs = {"reader": trainer("reader", args.experiment, shared), "alone": trainer("alone", args.experiment)}
        seconds = dict.fromkeys(runs, 0.0)
        first_step, same, rounds_read = {}, True, 0.0
        for step in range(args.steps):
            metrics = {name: run.step(step) for name, run in runs.items()}
            for name, m in metrics.items():
                seconds[name] += m[metric.PERF_STEP_S]
                first_step.setdefault(name, m[metric.PERF_STEP_S])
                print(f"step {step + 1} {name:6s}: {m[metric.PERF_STEP_S]:.1f} s (rollout "
                      f"{m[metric.PERF_ROLLOUT_S]:.1f} s, rounds read {m[metric.ROLLOUT_SHARED_ROUNDS]:.0f} of "
                      f"{m[metric.ROLLOUT_GENERATION_ROUNDS]:.0f})", flush=True)
            rounds_read += metrics["reader"][metric.ROLLOUT_SHARED_ROUNDS]
            same &= same_metrics(metrics["alone"], metrics["reader"], ignore=("perf/", metric.ROLLOUT_SHARED_ROUNDS))
            same &= same_batches(runs["alone"].last_batch, runs["reader"].last_batch)
        same &= same_weights(runs["alone"].model, runs["reader"].model)
    saving = 1 - seconds["reader"] / seconds["alone"]
    print(f"\n{args.steps} steps of {args.preset}/{args.experiment}: {seconds['alone']:.1f} s alone, "
          f"{seconds['reader']:.1f} s reading {args.sampler}'s first rollouts; saved {saving:.1%}")
    bench("shared_rollouts_same_results", int(same), "== 1")
    bench("shared_rollouts_rounds_read", rounds_read)
    bench("shared_rollouts_seconds_alone", seconds["alone"])
    bench("shared_rollouts_seconds_reader", seconds["reader"])
    bench("shared_rollouts_run_saving_frac", saving)
    bench("shared_rollouts_first_step_speedup", first_step["alone"] / first_step["reader"],
          f">= {FIRST_STEP_SPEEDUP_TARGET}")


if __name__ == "__main__":
    main()
