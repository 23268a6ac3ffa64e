"""LoRA (``policy.lora.rank > 0``): SFT then two GRPO steps train adapters only, and the saved
adapter loads everywhere — ``agentgrpo eval``, our loader, plain ``from_pretrained`` + ``PeftModel``
and transformers' own adapter loading. The tiny preset always; SmolLM2-135M when its GGUF is here."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from helpers import SMALL_ENV_OVERRIDES

from agentgrpo.cli import main
from agentgrpo.config import load_config
from agentgrpo.policy.hf import load_policy
from agentgrpo.policy.lora import adapter_base
from agentgrpo.train.grpo import train_grpo
from agentgrpo.train.grpo_config import GRPOConfig
from agentgrpo.train.sft import train_sft
from agentgrpo.train.sft_config import SFTConfig

peft = pytest.importorskip("peft", reason="the LoRA tests need peft: pip install 'agentgrpo[lora]'")
LORA = ["policy.lora.rank=4", "policy.lora.alpha=8"]


def lora_sft(init: str, run_dir: Path, *extra: str) -> Path:
    config = load_config(SFTConfig, [
        *SMALL_ENV_OVERRIDES, f"policy={init}", *LORA, f"run_dir={run_dir}", "env.splits.covered_seen=2",
        "data.demos_per_task=1", "data.max_length=900", "trainer.epochs=1", "trainer.batch_size=2",
        "trainer.micro_batch_size=1", "trainer.lr=1e-2", "progress=false", *extra,
    ], defaults="sft.yaml")
    return train_sft(config)


def lora_grpo(init: Path, run_dir: Path, *extra: str) -> Path:
    config = load_config(GRPOConfig, [
        *SMALL_ENV_OVERRIDES, f"policy.init={init}", *LORA, f"run_dir={run_dir}",
        "rollout.max_turns=1", "rollout.max_new_tokens=4", "rollout.max_total_tokens=1000",
        "trainer.steps=2", "trainer.tasks_per_step=1", "trainer.group_size=2", "trainer.mini_batch_size=2",
        "trainer.micro_batch_size=2", "trainer.lr=1e-2", "algo.entropy_coef=0.05", "algo.kl_coef=0",
        "trainer.lld_diagnostic=false", "trainer.old_logprobs=rollout", "logging.progress=false", *extra,
    ], defaults="grpo.yaml")
    return train_grpo(config)


def adapter_tensors(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(directory / "adapter_model.safetensors"))


@pytest.mark.slow
def test_lora_sft_then_two_grpo_steps_on_the_tiny_model(tiny_policy_dir, tmp_path):
    sft = lora_sft(str(tiny_policy_dir), tmp_path / "sft")
    assert (sft / "adapter_config.json").is_file() and not (sft / "model.safetensors").exists()
    assert adapter_base(sft) == str(tiny_policy_dir.resolve())
    stats = json.loads((tmp_path / "sft" / "sft_stats.json").read_text())
    assert 0 < stats["trainable_parameters"] < stats["parameters"] / 10 and stats["device"] == "cpu"
    sft_adapter = adapter_tensors(sft)
    assert any(name.endswith("lora_B.weight") and t.abs().sum() > 0 for name, t in sft_adapter.items())

    grpo = lora_grpo(sft, tmp_path / "grpo")
    records = [json.loads(line) for line in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2] and all(math.isfinite(r["loss/total"]) for r in records)
    assert (grpo / "adapter_config.json").is_file() and adapter_base(grpo) == str(tiny_policy_dir.resolve())
    grpo_adapter = adapter_tensors(grpo)
    assert set(grpo_adapter) == set(sft_adapter)  # the SFT adapter was trained further, not replaced
    assert any(not torch.equal(grpo_adapter[k], sft_adapter[k]) for k in sft_adapter)

    # plain transformers + peft: base from adapter_config.json, then the adapter; the base is untouched
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(adapter_base(grpo))
    original = {k: v.clone() for k, v in base.state_dict().items()}
    peft_model = peft.PeftModel.from_pretrained(base, str(grpo))
    ours, _ = load_policy(grpo)  # merged
    ids = torch.tensor([[5, 17, 99, 230, 7]])
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).logits, peft_model(ids).logits, atol=1e-4, rtol=1e-4)
        direct = AutoModelForCausalLM.from_pretrained(str(grpo))  # transformers loads adapters itself
        torch.testing.assert_close(direct(ids).logits, peft_model(ids).logits, atol=1e-4, rtol=1e-4)
    base_now = peft_model.get_base_model().state_dict()
    assert all(torch.equal(base_now[k], v) for k, v in original.items() if k in base_now and "lora" not in k)

    out = tmp_path / "eval"
    assert main(["eval", "--policy", str(grpo), *SMALL_ENV_OVERRIDES, "splits=[unseen]", "trials=1",
                 "rollout.max_turns=1", "rollout.max_new_tokens=4", "--out", str(out), "progress=false"]) == 0
    assert json.loads((out / "eval.json").read_text())["metrics"]["episodes"] == 4


@pytest.mark.gguf
@pytest.mark.slow
def test_lora_sft_then_two_grpo_steps_on_smollm2(tmp_path):
    from agentgrpo.policy.source import find_smollm2_gguf

    try:
        find_smollm2_gguf()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    # the compact prompt and short sequences keep a 135M model's CPU time to a few minutes (two GGUF loads)
    sft = lora_sft("smollm2-135m", tmp_path / "sft", "prompt_style=compact", "data.max_length=400")
    assert adapter_base(sft) == "smollm2-135m"
    grpo = lora_grpo(sft, tmp_path / "grpo", "rollout.max_total_tokens=600")
    records = [json.loads(line) for line in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2] and all(math.isfinite(r["loss/total"]) for r in records)
    assert (grpo / "adapter_model.safetensors").is_file()
