"""The rollout engine alone on ``rollout.py``'s workload: seconds and peak RSS, nothing else
in the process. For before/after comparisons of the engine: run it once with this checkout
and once with another on ``PYTHONPATH`` (its ``agentgrpo`` is the one measured), e.g.

    git worktree add ../agentgrpo-old <commit>
    PYTHONPATH=../agentgrpo-old python benchmarks/engine_only.py --policy runs/bench/sft-<hash>/final
    python benchmarks/engine_only.py --policy runs/bench/sft-<hash>/final

(the default policy is ``rollout.py``'s, trained once into ``runs/bench``). The engine runs
once untimed, then ``--reps`` times; peak RSS is the process's after those runs. About a
minute on 2 cores. Ends with BENCH lines.
"""

from __future__ import annotations

import argparse

from _common import (
    add_policy_arguments,
    airline_specs,
    bench,
    load_benchmark_policy,
    median,
    peak_rss_mb,
    set_threads,
    timed,
    world,
)

import agentgrpo.rollout.engine as engine_module
from agentgrpo.envs.config import EnvConfig
from agentgrpo.rollout.config import RolloutConfig
from agentgrpo.rollout.engine import RolloutEngine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_policy_arguments(parser)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    set_threads(args.threads)
    env_config = EnvConfig()
    bundle = world(env_config)
    tasks = bundle.tasks(["covered_seen", "uncovered_seen"])[:4]
    model, chat = load_benchmark_policy(bundle, args.policy, args.seed, args.policy_cache)
    # rollout.py's defaults: 4 tasks x 8 episodes, 8 turns of <= 64 tokens, temperature 0.5
    engine = RolloutEngine(model, chat, RolloutConfig(max_turns=8, max_new_tokens=64, max_total_tokens=4096,
                                                      temperature=0.5))
    print(f"engine: {engine_module.__file__}")

    def run() -> list:
        return engine.run(airline_specs(bundle, env_config, tasks, 8, 8, args.seed), seed=args.seed)

    run()  # warm-up
    times = []
    for rep in range(args.reps):
        trajectories, seconds = timed(run)
        sampled = sum(t.num_response_tokens for t in trajectories)
        print(f"  run {rep + 1}: {len(trajectories)} episodes in {seconds:.2f} s, {sampled} sampled tokens")
        times.append(seconds)
    bench("engine_seconds", median(times))
    bench("engine_peak_rss_mb", peak_rss_mb())


if __name__ == "__main__":
    main()
