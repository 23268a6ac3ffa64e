"""Decode attention per bucket of rows grouped by length, against one bucket as wide as the
longest row, on an evaluation-shaped workload.

Decoding on CPU is bound by reading the KV cache. With one bucket every row reads as many
slots as the longest row holds (masked past its own length); with ``rollout.bucket_rows``
the rows are regrouped by length every ``rollout.regroup_every`` steps and each bucket reads
only as far as its longest row. The workload is what ``agentgrpo eval`` runs: greedy
episodes of up to 20 turns of up to 160 tokens, more episodes than cache rows, so episodes
join the rows of finished ones and row lengths spread (the default: the 40 covered and
uncovered tasks of the generated world × 2 user seeds = 80 episodes through 64 rows). Both
settings must give the same trajectories, token for token; the engine alternates
between them, one warm-up run each, then ``--reps`` (1) timed pairs.

Run: ``python benchmarks/decode_buckets.py [--policy DIR]`` (``--policy``: e.g. an SFT or
GRPO checkpoint of ``agentgrpo ablate``; the default is the benchmarks' SFT policy, trained
once). One thread by default, as each job of ``agentgrpo ablate`` runs. About 8 minutes on
a quiet core; ``--quick`` is a smoke run (8 short episodes through 6 rows in buckets of 2,
with a barely trained policy). Ends with BENCH lines.
"""

from __future__ import annotations

import argparse
import dataclasses

from _common import (
    add_policy_arguments,
    airline_specs,
    bench,
    load_benchmark_policy,
    median,
    set_threads,
    timed,
    world,
)

from agentgrpo.envs.config import EnvConfig
from agentgrpo.rollout.config import RolloutConfig
from agentgrpo.rollout.engine import RolloutEngine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_policy_arguments(parser)
    parser.add_argument("--episodes-per-task", type=int, default=2, help="user seeds per task")
    parser.add_argument("--max-batch", type=int, default=64, help="cache rows (episodes at once)")
    parser.add_argument("--reps", type=int, default=1, help="timed pairs")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="smoke size")
    args = parser.parse_args()
    set_threads(args.threads)
    env_config = EnvConfig()
    bundle = world(env_config)
    tasks = bundle.tasks(["covered_seen", "uncovered_seen"])
    model, chat = load_benchmark_policy(bundle, args.policy, 0, args.policy_cache, args.quick)
    # evaluation's limits (eval.yaml): 20 turns of <= 160 tokens, greedy
    bucketed = RolloutConfig(max_turns=20, max_new_tokens=160, max_total_tokens=4096, temperature=0.0,
                             max_batch=args.max_batch)
    if args.quick:
        tasks, args.episodes_per_task, args.reps = tasks[:4], 2, 1
        bucketed = dataclasses.replace(bucketed, max_turns=4, max_new_tokens=32, max_batch=6, bucket_rows=2,
                                       regroup_every=4)
    settings = {"one bucket": dataclasses.replace(bucketed, bucket_rows=0), "bucketed": bucketed}
    print(f"{len(tasks)} tasks x {args.episodes_per_task} episodes through {bucketed.max_batch} rows; "
          f"bucket_rows={bucketed.bucket_rows}, regroup_every={bucketed.regroup_every}")

    def run(name: str) -> tuple[list, RolloutEngine]:
        engine = RolloutEngine(model, chat, settings[name])
        specs = airline_specs(bundle, env_config, tasks, args.episodes_per_task, bucketed.max_turns)
        return engine.run(specs), engine

    tokens = {name: [t.token_ids for t in run(name)[0]] for name in settings}  # warm-up, and the check
    same = tokens["one bucket"] == tokens["bucketed"]
    seconds: dict[str, list[float]] = {name: [] for name in settings}
    moved = 0
    for rep in range(args.reps):
        for name in settings:
            (trajectories, engine), elapsed = timed(lambda name=name: run(name))
            seconds[name].append(elapsed)
            moved = engine.last_stats.rows_moved if name == "bucketed" else moved
            stats = engine.last_stats
            print(f"  pair {rep + 1}, {name}: {elapsed:.1f} s ({stats.steps} steps, "
                  f"{stats.policy_tokens} sampled tokens, {stats.rows_moved} rows moved)")
    plain, grouped = median(seconds["one bucket"]), median(seconds["bucketed"])
    print(f"same trajectories: {same}")
    bench("decode_one_bucket_seconds", plain)
    bench("decode_bucketed_seconds", grouped)
    bench("decode_rows_moved", moved)
    bench("decode_bucketed_same_trajectories", float(same), "== 1")
    bench("decode_bucketed_speedup", plain / grouped, ">= 1.05")


if __name__ == "__main__":
    main()
