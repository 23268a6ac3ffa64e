"""Rollout throughput: the engine against the loop users would write, and against a ceiling.

The engine runs a GRPO batch (4 tasks × 8 episodes of the generated airline world with
the scripted user, up to 8 assistant turns of up to 64 tokens, the sampling of
``grpo.yaml``: temperature 0.5) with a trained policy (the short SFT run of
``_common.BENCH_SFT``, trained once; ``--policy`` overrides), environment, user
simulator, tokenisation and cache upkeep all included. It is compared with:

1. the naive multi-turn loop (``_baselines.naive_rollout``): per turn, re-encode every
   conversation and call a batched ``model.generate``, then run the tools; the same
   policy, tasks, user seeds, sampling and limits. ``rollout_vs_naive_multiturn_speedup``
   = engine episodes/s ÷ naive episodes/s (target ≥ 3).
2. the ceiling (``_baselines.ceiling_generate``): ONE ``generate`` over a row per episode
   whose prompts hold as many tokens as the engine prefilled and which decodes as many
   tokens as the engine sampled: the same token work with no book-keeping.
   ``rollout_vs_ceiling_ratio`` = ceiling seconds ÷ engine seconds (target ≥ 0.8).

Each figure is the median of ``--reps`` identical runs with fixed seeds after an untimed
warm-up (``--naive-reps`` for the slow naive loop). The engine's peak RSS is read before
the baselines run. Two episodes differ between the engine and the naive loop only by the
sampling draws; both workloads are printed.

Run: ``python benchmarks/rollout.py [--policy DIR|random] [--quick]`` (about 5 minutes on 2
quiet cores, plus about 2 the first time, to train the policy). Ends with BENCH lines.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable

from _baselines import NaiveStats, ceiling_generate, naive_rollout
from _common import (
    add_policy_arguments,
    airline_specs,
    bench,
    median,
    peak_rss_mb,
    rollout_workload,
    set_threads,
    timed,
)

from agentgrpo.agent.types import Trajectory
from agentgrpo.rollout.config import RolloutConfig
from agentgrpo.rollout.engine import EpisodeSpec, RolloutEngine, RolloutStats


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_policy_arguments(parser)
    parser.add_argument("--tasks", type=int, default=4, help="tasks in the batch")
    parser.add_argument("--group-size", type=int, default=8, help="episodes per task")
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tokens per assistant turn")
    parser.add_argument("--max-total-tokens", type=int, default=4096, help="tokens per episode (grpo.yaml)")
    parser.add_argument("--temperature", type=float, default=0.5, help="sampling temperature (grpo.yaml)")
    parser.add_argument("--reps", type=int, default=3, help="timed runs of the engine and the ceiling (median)")
    parser.add_argument("--naive-reps", type=int, default=1, help="timed runs of the naive loop (median)")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke size: 2 tasks x 4, 3 turns x 32 tokens, "
                        "a barely trained policy")
    args = parser.parse_args()
    if args.quick:
        args.tasks, args.group_size, args.max_turns, args.max_new_tokens = 2, 4, 3, 32
        args.reps, args.naive_reps = 1, 1
    return args


def measure_engine(engine: RolloutEngine, make_specs: Callable[[], list[EpisodeSpec]], reps: int,
                   seed: int) -> tuple[float, RolloutStats, list[Trajectory]]:
    """Median seconds of ``reps`` identical runs; the last run's stats and trajectories."""
    short = dataclasses.replace(engine.config, max_turns=1, max_new_tokens=4)
    RolloutEngine(engine.model, engine.chat, short).run(make_specs(), seed=seed)  # warm-up
    times, trajectories = [], []
    for rep in range(reps):
        trajectories, seconds = timed(lambda: engine.run(make_specs(), seed=seed))
        s = engine.last_stats
        turns = sum(len(t.turns) for t in trajectories)
        print(f"  engine run {rep + 1}: {s.episodes} episodes, {turns} turns in {seconds:.2f} s; "
              f"{s.policy_tokens} sampled, {s.prefill_tokens} prefilled tokens; {s.steps} steps; "
              f"model + sampling {s.generate_seconds:.2f} s, environment {s.env_seconds:.2f} s; "
              f"cache {s.cache_mb:.0f} MB")
        times.append(seconds)
    return median(times), engine.last_stats, trajectories


def measure_naive(engine: RolloutEngine, make_specs: Callable[[], list[EpisodeSpec]], reps: int,
                  seed: int) -> tuple[float, NaiveStats]:
    short = dataclasses.replace(engine.config, max_turns=1, max_new_tokens=4)
    naive_rollout(engine.model, engine.chat, make_specs(), short, seed)  # warm-up
    times, stats = [], NaiveStats()
    for rep in range(reps):
        stats, seconds = timed(lambda: naive_rollout(engine.model, engine.chat, make_specs(), engine.config, seed))
        print(f"  naive run {rep + 1}: {stats.episodes} episodes, {stats.turns} turns in {seconds:.2f} s; "
              f"{stats.sampled_tokens} sampled, {stats.encoded_tokens} re-encoded prompt tokens")
        times.append(seconds)
    return median(times), stats


def measure_ceiling(engine: RolloutEngine, trajectories: list[Trajectory], stats: RolloutStats, reps: int,
                    seed: int) -> float:
    rows = len(trajectories)
    prompt, new = max(1, round(stats.prefill_tokens / rows)), max(1, round(stats.policy_tokens / rows))
    token_ids = [t.token_ids for t in trajectories]
    print(f"ceiling: one generate of {rows} rows x ({prompt} prompt + {new} new tokens) = "
          f"{rows * prompt} prefilled, {rows * new} sampled")
    ceiling_generate(engine.model, engine.chat, token_ids, prompt, min(4, new), engine.config, seed)  # warm-up
    times = []
    for rep in range(reps):
        made, seconds = timed(lambda: ceiling_generate(engine.model, engine.chat, token_ids, prompt, new,
                                                       engine.config, seed))
        print(f"  ceiling run {rep + 1}: {made} tokens in {seconds:.2f} s")
        times.append(seconds)
    return median(times)


def main() -> None:
    args = parse_args()
    set_threads(args.threads)
    env_config, bundle, tasks, model, chat = rollout_workload(args)
    config = RolloutConfig(max_turns=args.max_turns, max_new_tokens=args.max_new_tokens,
                           max_total_tokens=args.max_total_tokens, temperature=args.temperature)
    engine = RolloutEngine(model, chat, config)

    def make_specs() -> list[EpisodeSpec]:
        return airline_specs(bundle, env_config, tasks, args.group_size, args.max_turns, args.seed)

    episodes = len(tasks) * args.group_size
    print(f"{len(tasks)} tasks x {args.group_size} episodes, max_turns {args.max_turns}, max_new_tokens "
          f"{args.max_new_tokens}, max_total_tokens {args.max_total_tokens}, temperature {args.temperature}")
    engine_seconds, stats, trajectories = measure_engine(engine, make_specs, args.reps, args.seed)
    rss = peak_rss_mb()
    print(f"engine: {episodes} episodes / {engine_seconds:.2f} s = {episodes / engine_seconds:.2f} episodes/s; "
          f"peak RSS {rss:.0f} MB")
    naive_seconds, _ = measure_naive(engine, make_specs, args.naive_reps, args.seed)
    print(f"naive:  {episodes} episodes / {naive_seconds:.2f} s = {episodes / naive_seconds:.2f} episodes/s")
    ceiling_seconds = measure_ceiling(engine, trajectories, stats, args.reps, args.seed)
    print(f"ceiling: {ceiling_seconds:.2f} s for the engine's token work")
    bench("rollout_episodes_per_s", episodes / engine_seconds)
    bench("naive_episodes_per_s", episodes / naive_seconds)
    bench("rollout_vs_naive_multiturn_speedup", naive_seconds / engine_seconds, ">= 3")
    bench("rollout_vs_ceiling_ratio", ceiling_seconds / engine_seconds, ">= 0.8")
    bench("rollout_peak_rss_mb", rss)


if __name__ == "__main__":
    main()
