"""The ``policy`` section (device, precision, LoRA; ``policy=X`` short for ``policy.init=X``) and the
evaluation's τ-bench defaults."""
from __future__ import annotations

import pytest
import torch

from agentgrpo.cli import main
from agentgrpo.config import ConfigError, load_config
from agentgrpo.eval.cli import load_eval_config
from agentgrpo.eval.evaluator import EvalConfig
from agentgrpo.policy.device import resolve_device
from agentgrpo.policy.settings import EvalPolicyConfig
from agentgrpo.train.grpo_config import GRPOConfig
from agentgrpo.train.sft_config import SFTConfig


def test_policy_shorthand_in_overrides_files_and_python(tmp_path):
    assert load_config(EvalConfig, ["policy=runs/x"], defaults="eval.yaml").policy.init == "runs/x"
    sft = load_config(SFTConfig, ["policy=small", "policy.lora.rank=8"], defaults="sft.yaml")
    assert (sft.policy.init, sft.policy.lora.rank, sft.policy.device) == ("small", 8, "auto")
    grpo = load_config(GRPOConfig, ["policy.device=cpu", "policy=runs/a/final"], defaults="grpo.yaml")
    assert (grpo.policy.init, grpo.policy.device) == ("runs/a/final", "cpu")
    file = tmp_path / "eval.yaml"
    file.write_text("policy: oracle\n")
    assert load_config(EvalConfig, [], defaults="eval.yaml", config_file=file).policy.init == "oracle"
    assert EvalConfig(policy="openai").policy == EvalPolicyConfig(init="openai")
    assert EvalConfig(policy="openai").policy_kind == "openai" and EvalConfig(policy="d").policy_kind == "checkpoint"


@pytest.mark.parametrize("override, key", [
    ("policy.device=gpu", "policy.device"), ("policy.lora.rank=-1", "policy.lora.rank"),
    ("policy.lora.dropout=1.5", "policy.lora.dropout"), ("policy.lora.target_modules=[]", "target_modules"),
    ("policy.dtype=float16", "policy.dtype"),
])
def test_bad_policy_values_name_their_key(override, key):
    with pytest.raises(ConfigError, match=key):
        load_config(SFTConfig, [override], defaults="sft.yaml")


def test_devices():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="policy.device=cuda: this machine has no CUDA device"):
            resolve_device("cuda")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error of a machine without CUDA")
def test_asking_for_an_absent_gpu_is_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["sft", "policy.device=cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "policy.device=cuda" in err[0]


def test_tau_bench_evaluation_defaults_follow_tau_bench(tmp_path):
    tau = load_eval_config(["env.source=tau_bench", f"env.data_dir={tmp_path}"])
    assert tau.rollout.max_turns == 30 and tau.rollout.temperature == 0.0
    assert tau.env.user.kind == "llm" and tau.env.user.temperature is None and tau.env.user_temperature is None
    mine = load_eval_config(["env.source=tau_bench", f"env.data_dir={tmp_path}", "rollout.max_turns=5",
                             "env.user.temperature=0.7"])
    assert mine.rollout.max_turns == 5 and mine.env.user_temperature == 0.7
    generated = load_eval_config([])
    assert generated.rollout.max_turns == 20 and generated.env.user_temperature == 0.0
    file = tmp_path / "tau.yaml"
    file.write_text(f"env: {{source: tau_bench, data_dir: {tmp_path}}}\n")
    assert load_eval_config([], str(file)).rollout.max_turns == 30
