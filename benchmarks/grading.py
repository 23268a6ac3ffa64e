"""Episode reset + grading cost on the τ-bench airline data: naive vs fast.

Each episode runs one task's gold actions (untimed) between a timed reset and a
timed grade:

* naive — what τ-bench does minus re-reading the JSON: reset = a deep copy of the
  loaded data; grade = replay the gold actions on another deep copy, then hash both
  databases in full (``domain.copied_state()``: a full-copy state hashed in full).
* fast — ``domain.new_state()`` (an empty overlay on the shared base) and
  ``domain.grade`` (incremental multiset hash of the touched records; the gold hash
  is cached per task, so the first pass over the tasks pays each gold replay once,
  and that cost is included in the average).

Run: ``python benchmarks/grading.py [--tau-bench-dir DIR] [--fast-passes N]``
(about 30 s). Ends with BENCH lines.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

from agentgrpo.config import MissingFileError
from agentgrpo.envs.config import EnvConfig, UserConfig
from agentgrpo.envs.registry import build_env, check_data
from agentgrpo.envs.types import Task

DEFAULT_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "tau_bench_airline"


def tau_bench_config(path: str) -> EnvConfig:
    """τ-bench's airline data at ``path`` as the registry builds it (its user is an LLM's: the data has
    no scripts; no episode is played here). Raises MissingFileError naming what is missing."""
    config = EnvConfig(source="tau_bench", data_dir=str(path), user=UserConfig(kind="llm"))
    check_data(config)
    return config


def naive_episode(domain: Any, task: Task) -> tuple[float, float]:
    """(reset+grade seconds, reward) with full copies and full hashes."""
    start = time.perf_counter()
    state = domain.copied_state()
    reset = time.perf_counter() - start
    domain.replay(task.actions, state)  # the episode itself: not timed
    start = time.perf_counter()
    gold, _ = domain.replay(task.actions, domain.copied_state())
    match = state.db_hash() == gold.db_hash()
    grade = time.perf_counter() - start
    return reset + grade, float(match)


def fast_episode(domain: Any, task: Task) -> tuple[float, float]:
    """(reset+grade seconds, reward) with the overlay state and cached gold hashes."""
    start = time.perf_counter()
    state = domain.new_state()
    reset = time.perf_counter() - start
    domain.replay(task.actions, state)  # the episode itself: not timed
    start = time.perf_counter()
    reward = domain.reward(state, task, task.outputs)
    grade = time.perf_counter() - start
    return reset + grade, reward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tau-bench-dir", default=os.environ.get("AGENTGRPO_TAU_BENCH_DIR", DEFAULT_DIR))
    parser.add_argument("--fast-passes", type=int, default=10, help="passes over the 50 tasks (fast)")
    args = parser.parse_args()

    try:
        config = tau_bench_config(args.tau_bench_dir)
    except MissingFileError as e:
        print(f"skipped: {e} (pass --tau-bench-dir DIR or set AGENTGRPO_TAU_BENCH_DIR)")
        return
    start = time.perf_counter()
    domain = build_env(config).domain
    print(f"build_env (tau_bench): {1000 * (time.perf_counter() - start):.1f} ms, {len(domain.tasks)} tasks")
    start = time.perf_counter()
    domain.new_state().db_hash()
    print(f"base digests (once per domain, on first hash): {1000 * (time.perf_counter() - start):.1f} ms")

    naive = [naive_episode(domain, task) for task in domain.tasks]
    naive_ms = 1000 * statistics.mean(t for t, _ in naive)
    print(f"naive: {len(naive)} episodes, mean reset+grade {naive_ms:.2f} ms, "
          f"rewards {sum(r for _, r in naive):.0f}/{len(naive)}")

    fresh = build_env(config).domain  # no gold hash cached yet: the first pass pays each gold replay
    fresh.new_state().db_hash()  # base digests: a per-domain cost, reported above
    passes = [[fast_episode(fresh, task) for task in fresh.tasks] for _ in range(args.fast_passes)]
    cold_ms = 1000 * statistics.mean(t for t, _ in passes[0])
    warm = [t for episodes in passes[1:] for t, _ in episodes] or [t for t, _ in passes[0]]
    fast_ms = 1000 * statistics.mean(t for episodes in passes for t, _ in episodes)
    print(f"fast: {args.fast_passes} passes x {len(fresh.tasks)} episodes; first pass (gold replays) "
          f"{cold_ms:.3f} ms, later passes {1000 * statistics.mean(warm):.3f} ms, mean {fast_ms:.3f} ms, "
          f"rewards {sum(r for _, r in passes[0]):.0f}/{len(passes[0])}")

    print(f"BENCH grading_naive_ms {naive_ms:.3f} target info")
    print(f"BENCH grading_fast_ms {fast_ms:.4f} target info")
    print(f"BENCH grading_speedup {naive_ms / fast_ms:.1f} target >= 20")


if __name__ == "__main__":
    main()
