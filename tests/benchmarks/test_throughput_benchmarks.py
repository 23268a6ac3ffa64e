"""Smoke runs of the throughput benchmarks: they finish, and their BENCH lines are sound.

Each runs its script at smoke size (``--quick``, one thread) in a subprocess, as a user
would, and checks the numbers that must hold whatever the machine's speed: the ceiling
makes as many tokens as the engine did, ratios are consistent with the rates printed.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
BENCH_LINE = re.compile(r"^BENCH (\S+) (\S+) target (.+)$", re.MULTILINE)


def run_benchmark(script: str, *args: str) -> tuple[str, dict[str, tuple[float, str]]]:
    """stdout of ``benchmarks/<script> --quick --threads 1 <args>`` and its BENCH lines."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(BENCHMARKS / script), "--quick", "--threads", "1", *args]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300,
                            check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    found = BENCH_LINE.findall(result.stdout)
    lines = {name: (float(value), target) for name, value, target in found}
    return result.stdout, lines


def test_rollout_benchmark_matches_the_ceiling_to_the_engine_tokens():
    out, bench = run_benchmark("rollout.py", "--reps", "1")
    assert set(bench) == {"rollout_tokens_per_s", "generate_tokens_per_s",
                          "rollout_vs_generate_ratio"}
    assert bench["rollout_vs_generate_ratio"][1] == ">= 0.7"
    assert bench["rollout_tokens_per_s"][1] == "info"
    engine_tokens = int(re.search(r"^engine: +(\d+) tokens", out, re.MULTILINE).group(1))
    generate_tokens = int(re.search(r"^generate: +(\d+) tokens", out, re.MULTILINE).group(1))
    episodes = 2 * 4  # --quick: 2 tasks x 4 episodes
    # the ceiling makes round(engine tokens / episodes) tokens in every row: eos cannot stop one
    assert generate_tokens == episodes * round(engine_tokens / episodes)
    rate, ceiling = bench["rollout_tokens_per_s"][0], bench["generate_tokens_per_s"][0]
    assert rate > 0 and ceiling > 0
    assert bench["rollout_vs_generate_ratio"][0] == pytest.approx(rate / ceiling, rel=2e-3)


def test_train_step_benchmark_reports_split_rates_and_memory():
    out, bench = run_benchmark("train_step.py", "--steps", "1", "--no-trl")
    assert set(bench) == {"train_step_seconds", "train_tokens_per_s",
                          "train_vs_raw_fwd_bwd_ratio", "peak_rss_mb"}
    assert bench["train_vs_raw_fwd_bwd_ratio"][1] == ">= 0.8"
    split = re.search(r"step split \(median of 1\): (.*); step ([\d.]+) s", out)
    phases = dict(re.findall(r"(\w+) ([\d.]+) s \(", split.group(1)))
    assert set(phases) == {"rollout", "score", "old_logprobs", "update", "lld_diagnostic"}
    # the step is the sum of its phases (each printed to 0.01 s)
    assert sum(map(float, phases.values())) == pytest.approx(float(split.group(2)), abs=0.03)
    assert bench["train_step_seconds"][0] == pytest.approx(float(split.group(2)), abs=0.01)
    assert bench["train_tokens_per_s"][0] > 0 and bench["train_vs_raw_fwd_bwd_ratio"][0] > 0
    assert 100 < bench["peak_rss_mb"][0] < 64_000  # MB, not KiB or bytes


@pytest.mark.slow
@pytest.mark.trl
def test_train_step_benchmark_compares_with_trl_on_identical_prompts():
    pytest.importorskip("trl")
    out, bench = run_benchmark("train_step.py", "--steps", "1")
    assert bench["ours_vs_trl_step_time_ratio"][1] == "<= 1.0"
    assert bench["ours_vs_trl_step_time_ratio"][0] > 0
    assert "tokenisations differ" not in out  # TRL's chat template gives our prompt tokens
    assert re.search(r"TRL step 2: [\d.]+ s", out)  # warm-up + 1 measured step ran
