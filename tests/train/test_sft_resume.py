"""Resuming SFT: a run interrupted after its checkpoint and resumed ends with the uninterrupted
run's weights, metrics and stats; a save that fails midway leaves no half checkpoint; a resume
with a different config is refused."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import SMALL_ENV_OVERRIDES
from safetensors.torch import load_file

from agentgrpo.config import load_config
from agentgrpo.tracking import read_metrics
from agentgrpo.train import checkpoint as checkpoint_module
from agentgrpo.train import sft
from agentgrpo.train.checkpoint import list_checkpoints, load_trainer_state
from agentgrpo.train.resume import ResumeConfigError
from agentgrpo.train.sft import train_sft
from agentgrpo.train.sft_config import SFTConfig

COPY = ["data.relabel_ids=true", "data.copy_check_tasks=2", "data.copy_check_every=1", "trainer.copy_warmup_steps=2",
        "trainer.copy_warmup_batch_size=2", "trainer.copy_warmup_context=16", "trainer.copy_mix_weight=0.5"]
"""Everything random in SFT besides the example order: fresh ids per epoch, the copy task's batches."""


def overrides(run_dir: Path, *extra: str) -> list[str]:
    """test_sft's small runs (8 demonstrations, 2 optimizer steps per epoch, 2 epochs), shorter sequences."""
    return [*SMALL_ENV_OVERRIDES, f"run_dir={run_dir}", "data.demos_per_task=2", "data.max_length=900",
            "trainer.epochs=2", "trainer.batch_size=4", "trainer.micro_batch_size=2", "trainer.lr=2e-3",
            "progress=false", *extra]


def config(run_dir: Path, *extra: str) -> SFTConfig:
    return load_config(SFTConfig, overrides(run_dir, *extra), defaults="sft.yaml")


def comparable(record: dict) -> dict:
    return {k: v for k, v in record.items() if not k.startswith("perf/")}


def stats(run_dir: Path) -> dict:
    """sft_stats.json without its timings."""
    data = json.loads((run_dir / "sft_stats.json").read_text())
    del data["wall_seconds"]
    data.get("copy_warmup", {}).pop("seconds", None)
    return data


def assert_same_weights(a: Path, b: Path, name: str) -> None:
    first, second = load_file(str(a / name)), load_file(str(b / name))
    assert first.keys() == second.keys()
    for key in first:
        assert torch.allclose(first[key], second[key], atol=1e-6, rtol=0), key


def counting_steps(monkeypatch, fail_at: int | None = None) -> list[int]:
    """Count SFT's optimizer steps (``_optimizer_step``, the real one); the ``fail_at``-th is
    interrupted with KeyboardInterrupt, as a Ctrl-C there would."""
    calls: list[int] = []
    real = sft._optimizer_step

    def step(*args, **kwargs):
        calls.append(len(calls) + 1)
        if len(calls) == fail_at:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(sft, "_optimizer_step", step)
    return calls


def test_an_interrupted_run_resumes_to_the_uninterrupted_weights_metrics_and_stats(tmp_path, monkeypatch):
    straight, cut = tmp_path / "straight", tmp_path / "cut"
    train_sft(config(straight, *COPY, "trainer.save_every=2"))
    assert [p.name for p in list_checkpoints(straight)] == ["step_000002"]  # none at the last step: final/ is it

    counting_steps(monkeypatch, fail_at=4)
    with pytest.raises(KeyboardInterrupt):
        train_sft(config(cut, *COPY, "trainer.save_every=2"))
    assert [r["step"] for r in read_metrics(cut / "metrics.jsonl")] == [1, 2, 3]  # step 3 ran after the checkpoint
    assert [p.name for p in list_checkpoints(cut)] == ["step_000002"] and not (cut / "final").exists()
    saved = load_trainer_state(list_checkpoints(cut)[0])
    assert saved["step"] == 2 and [point["step"] for point in saved["copy_curve"]] == [1, 2]

    steps = counting_steps(monkeypatch)
    train_sft(config(cut, *COPY, "trainer.save_every=2", "trainer.keep_last=1", "progress=true"), resume=True)
    assert len(steps) == 2  # steps 3 and 4: the first two are replayed, not computed; no warm-up either
    a, b = read_metrics(straight / "metrics.jsonl"), read_metrics(cut / "metrics.jsonl")
    assert [r["step"] for r in b] == [1, 2, 3, 4]  # step 3's first row is gone
    assert [comparable(r) for r in a] == [comparable(r) for r in b]
    assert_same_weights(straight / "final", cut / "final", "model.safetensors")
    assert stats(straight) == stats(cut)  # the copy check's curve and the warm-up's result included

    # a resume that would compute something else is refused, through the CLI in one line
    with pytest.raises(ResumeConfigError, match=r"trainer.epochs \(2 → 3\)"):
        train_sft(config(cut, *COPY, "trainer.epochs=3"), resume=True)
    from agentgrpo.cli import main

    assert main(["sft", *overrides(cut, *COPY, "trainer.lr=1e-3"), "--resume"]) == 2


def test_lora_dropout_resumes_exactly_and_a_failed_save_leaves_no_half_checkpoint(tmp_path, monkeypatch):
    """LoRA's dropout draws from torch's generator, which the checkpoint restores; a save that fails
    after writing its files (a full disk) leaves the previous checkpoints and nothing else."""
    pytest.importorskip("peft", reason="LoRA needs peft: pip install 'agentgrpo[lora]'")
    lora = ["policy.lora.rank=4", "policy.lora.alpha=8", "trainer.save_every=1", "data.copy_check_tasks=0"]
    straight, cut = tmp_path / "straight", tmp_path / "cut"
    train_sft(config(straight, *lora))

    real_fsync, saves = checkpoint_module._fsync_tree, []

    def full_disk(root: Path) -> None:
        saves.append(root)
        if len(saves) == 3:
            raise OSError(28, "No space left on device")
        real_fsync(root)

    monkeypatch.setattr(checkpoint_module, "_fsync_tree", full_disk)
    with pytest.raises(OSError, match="No space"):
        train_sft(config(cut, *lora))
    assert saves[2].name.startswith(".step_000003.tmp-") and not saves[2].exists()
    assert sorted(p.name for p in (cut / "checkpoints").iterdir()) == ["step_000001", "step_000002"]

    monkeypatch.setattr(checkpoint_module, "_fsync_tree", real_fsync)
    train_sft(config(cut, *lora), resume=True)
    assert [comparable(r) for r in read_metrics(straight / "metrics.jsonl")] == [
        comparable(r) for r in read_metrics(cut / "metrics.jsonl")]
    assert_same_weights(straight / "final", cut / "final", "adapter_model.safetensors")
