"""The GRPO trainer validates on the validation split, never on training or test tasks."""
from __future__ import annotations

import json

import pytest
from helpers import SMALL_ENV_OVERRIDES

import agentgrpo.train.grpo as grpo
from agentgrpo.config import ConfigError, load_config
from agentgrpo.train.grpo import GRPOTrainer
from agentgrpo.train.grpo_config import GRPOConfig


def config(policy_dir, run_dir, *overrides: str) -> GRPOConfig:
    return load_config(GRPOConfig, [
        *SMALL_ENV_OVERRIDES, f"policy.init={policy_dir}", f"run_dir={run_dir}",
        "rollout.max_turns=1", "rollout.max_new_tokens=4", "rollout.max_total_tokens=900",
        "trainer.steps=1", "trainer.tasks_per_step=1", "trainer.group_size=2", "trainer.mini_batch_size=2",
        "trainer.micro_batch_size=2", "trainer.save_every=0", "logging.progress=false", *overrides,
    ], defaults="grpo.yaml")


def test_validation_runs_the_validation_split(tiny_policy_dir, tmp_path, monkeypatch):
    played = []
    real_make_env = grpo.make_env

    def recording_make_env(bundle, task, *args, **kwargs):  # the real environment, its task noted
        played.append(task.task_id)
        return real_make_env(bundle, task, *args, **kwargs)

    monkeypatch.setattr(grpo, "make_env", recording_make_env)
    trainer = GRPOTrainer(config(tiny_policy_dir, tmp_path, "trainer.val_every=1", "trainer.val_tasks=3"))
    trainer.train()
    validation = [task.task_id for task in trainer.bundle.splits["validation"]]
    assert played[-3:] == validation[:3]  # the training step's 2 episodes come first
    record = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert 0.0 <= record["val/pass1"] <= 1.0


def test_validating_without_validation_tasks_is_refused(tiny_policy_dir, tmp_path):
    with pytest.raises(ConfigError, match=r"trainer.val_every=2 needs validation tasks.*env.splits.validation=0"):
        config(tiny_policy_dir, tmp_path, "trainer.val_every=2", "env.splits.validation=0")
