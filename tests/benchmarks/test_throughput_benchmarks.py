"""Smoke runs of the throughput benchmarks: they finish, and their BENCH lines are sound.

Each runs its script at smoke size (``--quick``, one thread) in a subprocess, as a user
would, with its default (trained) policy: ``--quick`` trains it with a few SFT steps, once
for both scripts (a shared ``--policy-cache``). The checks are the numbers that must hold
whatever the machine's speed: the ceiling does the engine's token work, ratios are
consistent with the rates printed.
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


@pytest.fixture(scope="module")
def policy_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("bench-policy")


def run_benchmark(script: str, cache: Path, *args: str) -> tuple[str, dict[str, tuple[float, str]]]:
    """stdout of ``benchmarks/<script> --quick --threads 1 <args>`` and its BENCH lines."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(BENCHMARKS / script), "--quick", "--threads", "1", "--policy-cache", str(cache),
               *args]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300,
                            check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    found = BENCH_LINE.findall(result.stdout)
    lines = {name: (float(value), target) for name, value, target in found}
    return result.stdout, lines


def test_rollout_benchmark_compares_with_the_naive_loop_and_the_ceiling(policy_cache):
    out, bench = run_benchmark("rollout.py", policy_cache)
    assert set(bench) == {"rollout_episodes_per_s", "naive_episodes_per_s", "rollout_vs_naive_multiturn_speedup",
                          "rollout_vs_ceiling_ratio", "rollout_peak_rss_mb"}
    assert bench["rollout_vs_naive_multiturn_speedup"][1] == ">= 3"
    assert bench["rollout_vs_ceiling_ratio"][1] == ">= 0.8"
    assert "policy: training it once" in out or "trained earlier" in out  # the default is the SFT policy
    episodes = 2 * 4  # --quick: 2 tasks x 4 episodes
    engine = re.search(r"engine run 1: (\d+) episodes, \d+ turns in [\d.]+ s; (\d+) sampled, (\d+) prefilled", out)
    assert int(engine.group(1)) == episodes
    sampled, prefilled = int(engine.group(2)), int(engine.group(3))
    # the ceiling does the engine's token work: a row per episode, prefill and samples split evenly
    rows, prompt, new = map(int, re.search(r"one generate of (\d+) rows x \((\d+) prompt \+ (\d+) new", out).groups())
    assert (rows, prompt, new) == (episodes, round(prefilled / episodes), round(sampled / episodes))
    assert int(re.search(r"ceiling run 1: (\d+) tokens", out).group(1)) == rows * new
    naive = re.search(r"naive run 1: (\d+) episodes, (\d+) turns", out)
    assert int(naive.group(1)) == episodes and int(naive.group(2)) >= episodes
    rate, naive_rate = bench["rollout_episodes_per_s"][0], bench["naive_episodes_per_s"][0]
    assert rate > 0 and naive_rate > 0
    assert bench["rollout_vs_naive_multiturn_speedup"][0] == pytest.approx(rate / naive_rate, rel=2e-3)
    assert bench["rollout_vs_ceiling_ratio"][0] > 0
    assert 100 < bench["rollout_peak_rss_mb"][0] < 64_000  # MB


def test_train_step_benchmark_reports_split_rates_and_memory(policy_cache):
    out, bench = run_benchmark("train_step.py", policy_cache, "--steps", "1", "--no-trl")
    assert set(bench) == {"train_step_seconds", "grpo_step_rollout_seconds", "grpo_step_rollout_share",
                          "train_tokens_per_s", "train_vs_raw_fwd_bwd_ratio", "peak_rss_mb"}
    assert bench["train_vs_raw_fwd_bwd_ratio"][1] == ">= 0.8"
    split = re.search(r"step split \(median of 1\): (.*); step ([\d.]+) s", out)
    phases = dict(re.findall(r"(\w+) ([\d.]+) s \(", split.group(1)))
    assert set(phases) == {"rollout", "score", "old_logprobs", "update", "lld_diagnostic"}
    # the step is the sum of its phases (each printed to 0.01 s)
    assert sum(map(float, phases.values())) == pytest.approx(float(split.group(2)), abs=0.03)
    assert bench["train_step_seconds"][0] == pytest.approx(float(split.group(2)), abs=0.01)
    assert bench["grpo_step_rollout_seconds"][0] == pytest.approx(float(phases["rollout"]), abs=0.01)
    share = bench["grpo_step_rollout_seconds"][0] / bench["train_step_seconds"][0]
    assert bench["grpo_step_rollout_share"][0] == pytest.approx(share, rel=0.01)
    assert bench["grpo_step_rollout_share"][1].startswith("<=")
    assert bench["train_tokens_per_s"][0] > 0 and bench["train_vs_raw_fwd_bwd_ratio"][0] > 0
    assert 100 < bench["peak_rss_mb"][0] < 64_000  # MB, not KiB or bytes


@pytest.mark.slow
@pytest.mark.trl
def test_train_step_benchmark_compares_with_trl_on_identical_prompts(policy_cache):
    pytest.importorskip("trl")
    out, bench = run_benchmark("train_step.py", policy_cache, "--steps", "1")
    assert bench["ours_vs_trl_step_time_ratio"][1] == "<= 1.0"
    assert bench["ours_vs_trl_step_time_ratio"][0] > 0
    assert "tokenisations differ" not in out  # TRL's chat template gives our prompt tokens
    assert re.search(r"TRL step 2: [\d.]+ s", out)  # warm-up + 1 measured step ran


def test_decode_buckets_benchmark_keeps_trajectories_and_moves_rows(policy_cache):
    out, bench = run_benchmark("decode_buckets.py", policy_cache)
    assert set(bench) == {"decode_one_bucket_seconds", "decode_bucketed_seconds", "decode_rows_moved",
                          "decode_bucketed_same_trajectories", "decode_bucketed_speedup"}
    assert bench["decode_bucketed_same_trajectories"] == (1.0, "== 1")  # grouping moves caches, not draws
    assert bench["decode_rows_moved"][0] > 0  # --quick: 6 rows in buckets of 2, regrouped every 4 steps
    assert bench["decode_bucketed_speedup"][1] == ">= 1.05"
    ratio = bench["decode_one_bucket_seconds"][0] / bench["decode_bucketed_seconds"][0]
    assert bench["decode_bucketed_speedup"][0] == pytest.approx(ratio, rel=1e-2)
    assert "4 tasks x 2 episodes through 6 rows; bucket_rows=2, regroup_every=4" in out


def test_shared_forwards_benchmark_finds_identical_results(policy_cache):
    out, bench = run_benchmark("shared_forwards.py", policy_cache, "--steps", "2")
    assert set(bench) == {"shared_forwards_same_results", "shared_forwards_learn_seconds_apart",
                          "shared_forwards_learn_seconds_shared", "shared_forwards_step_saving_frac",
                          "shared_forwards_learn_speedup"}
    assert bench["shared_forwards_same_results"] == (1.0, "== 1")  # skipping passes changes no bit
    assert bench["shared_forwards_learn_speedup"][1] == ">= 1.15"
    ratio = bench["shared_forwards_learn_seconds_apart"][0] / bench["shared_forwards_learn_seconds_shared"][0]
    assert bench["shared_forwards_learn_speedup"][0] == pytest.approx(ratio, rel=1e-2)
    assert len(re.findall(r"^step [12] (apart |shared): rollout", out, re.MULTILINE)) == 4


def test_shared_rollouts_benchmark_finds_identical_results(policy_cache):
    out, bench = run_benchmark("shared_rollouts.py", policy_cache, "--steps", "2")
    assert set(bench) == {"shared_rollouts_same_results", "shared_rollouts_rounds_read",
                          "shared_rollouts_seconds_alone", "shared_rollouts_seconds_reader",
                          "shared_rollouts_run_saving_frac", "shared_rollouts_first_step_speedup"}
    assert bench["shared_rollouts_same_results"] == (1.0, "== 1")  # reading changes no bit
    assert bench["shared_rollouts_rounds_read"][0] == 1  # the sampler stored the first step's one round
    assert bench["shared_rollouts_first_step_speedup"][1] == ">= 1.3"
    saving = 1 - bench["shared_rollouts_seconds_reader"][0] / bench["shared_rollouts_seconds_alone"][0]
    assert bench["shared_rollouts_run_saving_frac"][0] == pytest.approx(saving, abs=2e-3)
    assert len(re.findall(r"^step [12] (reader|alone ): ", out, re.MULTILINE)) == 4


def test_decode_cache_layout_benchmark_reports_every_dtype_and_the_transposed_keys():
    command = [sys.executable, str(BENCHMARKS / "decode_cache_layout.py"), "--quick", "--threads", "1"]
    result = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    bench = {name: (float(value), target) for name, value, target in BENCH_LINE.findall(result.stdout)}
    assert set(bench) == {"decode_own_fp32_ms", "decode_own_bf16_vs_fp32", "decode_own_fp16_vs_fp32",
                          "decode_scores_transposed_keys_vs_fp32", "decode_scores_vs_read_floor"}
    assert all(value > 0 and target == "info" for value, target in bench.values())
    assert "128 rows x 4 heads x 64 own slots" in result.stdout
    per_dtype = {dtype: (float(scores), float(values)) for dtype, scores, values in re.findall(
        r"^\s+(float32|bfloat16|float16)\s+q\.K\^T\s+([\d.]+)\s+weights\.V\s+([\d.]+)$", result.stdout, re.MULTILINE)}
    assert set(per_dtype) == {"float32", "bfloat16", "float16"}
    # the headline is the float32 pair's sum, and each ratio is the dtype's sum over it
    fp32 = sum(per_dtype["float32"])
    assert bench["decode_own_fp32_ms"][0] == pytest.approx(fp32, rel=0.02, abs=0.01)
    assert bench["decode_own_bf16_vs_fp32"][0] == pytest.approx(sum(per_dtype["bfloat16"]) / fp32, rel=0.05)


def test_constrained_decoding_benchmark_compares_the_three_modes(policy_cache):
    out, bench = run_benchmark("constrained_decoding.py", policy_cache)
    assert set(bench) == {"free_rollout_tokens_per_s", "constrained_vs_free_tokens_per_s",
                          "copy_constrained_vs_free_tokens_per_s", "mask_replay_us_per_token",
                          "copy_mask_replay_us_per_token"}
    rates = {mode: float(rate) for mode, rate in re.findall(r"^(free|schema|schema\+copy): ([\d.]+) sampled", out,
                                                            re.MULTILINE)}
    assert bench["constrained_vs_free_tokens_per_s"][0] == pytest.approx(rates["schema"] / rates["free"], rel=2e-3)
    assert bench["mask_replay_us_per_token"][0] > 0 and bench["mask_replay_us_per_token"][1] == "<= 200"
