"""Same checkpoint, same config, same numbers: a greedy evaluation does not depend on Python's hash
seed, torch's thread count or how many episodes are batched together (docs/evaluation.md says what
can still differ across machines)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import SMALL_ENV_OVERRIDES

SETTINGS = [*SMALL_ENV_OVERRIDES, "splits=[unseen]", "trials=2", "rollout.max_turns=3", "rollout.max_new_tokens=12",
            "progress=false", "policy.device=cpu"]


def run_eval(policy: Path, out: Path, hash_seed: str, threads: str, *extra: str) -> None:
    env = dict(os.environ, PYTHONHASHSEED=hash_seed, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    subprocess.run([sys.executable, "-m", "agentgrpo.cli", "eval", "--policy", str(policy), "--out", str(out),
                    *SETTINGS, *extra], check=True, env=env, capture_output=True, timeout=170)


def episodes(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "transcripts.jsonl").read_text().splitlines()]


@pytest.mark.slow  # two evaluation processes: ~50 s on 2 cores
def test_greedy_evaluation_is_the_same_across_hash_seeds_threads_and_batching(tiny_policy_dir, tmp_path):
    run_eval(tiny_policy_dir, tmp_path / "a", "0", "2")
    run_eval(tiny_policy_dir, tmp_path / "b", "12345", "1", "max_batch=3", "rollout.max_batch=2")
    a, b = episodes(tmp_path / "a"), episodes(tmp_path / "b")
    assert len(a) == 8 and sum(len(e["messages"]) for e in a) > 8 * 3  # the policy spoke
    assert a == b  # every message, reward, user seed and process score
    report_a, report_b = (json.loads((tmp_path / n / "eval.json").read_text()) for n in ("a", "b"))
    assert report_a["metrics"] == report_b["metrics"] and report_a["per_task"] == report_b["per_task"]
