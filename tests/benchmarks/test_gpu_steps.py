"""The prepared GPU check (benchmarks/gpu_steps.py) runs end to end on CPU with the tiny preset."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.slow
def test_gpu_steps_smoke_on_cpu(tmp_path):
    markdown = tmp_path / "gpu.md"
    command = [sys.executable, str(BENCHMARKS / "gpu_steps.py"), "--quick", "--threads", "1", "--steps", "2",
               "--device", "cpu", "--markdown", str(markdown)]
    result = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                            timeout=900, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    bench = dict(re.findall(r"^BENCH (\S+) (\S+) target info$", result.stdout, re.MULTILINE))
    assert set(bench) == {"gpu_sft_steps_per_s", "gpu_sft_tokens_per_s", "gpu_grpo_steps_per_s",
                          "gpu_grpo_rollout_share"}
    assert all(float(v) > 0 for v in bench.values()) and float(bench["gpu_grpo_rollout_share"]) < 1
    assert "model tiny: SFT ran" in result.stdout
    assert "| SFT (batch 4) |" in markdown.read_text()


def test_a_model_shape_is_built_where_no_checkpoint_can_reach(tmp_path):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from gpu_steps import SHAPES, build_shape
    finally:
        sys.path.remove(str(BENCHMARKS))
    from agentgrpo.policy.hf import load_policy, read_agent_config

    model, tokenizer = load_policy(build_shape("toy", tmp_path / "toy", "cpu"))
    assert model.config.hidden_size == SHAPES["toy"]["hidden_size"] and model.config.attention_bias
    assert model.config.vocab_size == len(tokenizer) and read_agent_config(tmp_path / "toy")["prompt_style"] == "full"
    assert SHAPES["7b"]["num_key_value_heads"] == 4 and SHAPES["1.5b"]["num_hidden_layers"] == 28
