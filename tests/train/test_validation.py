"""The GRPO trainer validates on the validation split, never on training or test tasks."""
from __future__ import annotations

import json

import pytest
from helpers import SMALL_ENV_OVERRIDES

import agentgrpo.train.groups as groups
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
    real_make_env = groups.make_env

    def recording_make_env(bundle, task, *args, **kwargs):  # the real environment, its task noted
        played.append(task.task_id)
        return real_make_env(bundle, task, *args, **kwargs)

    monkeypatch.setattr(groups, "make_env", recording_make_env)
    trainer = GRPOTrainer(config(tiny_policy_dir, tmp_path, "trainer.val_every=1", "trainer.val_tasks=3"))
    trainer.train()
    validation = [task.task_id for task in trainer.groups.bundle.splits["validation"]]
    assert played[:3] == validation[:3] and played[-3:] == validation[:3]  # before the first step and after it
    start, first = (json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines())
    assert start == {"step": 0, "val/pass1": start["val/pass1"], "val/episodes": 3.0}  # the initial policy
    assert 0.0 <= first["val/pass1"] <= 1.0 and first["step"] == 1


def test_heldout_validation_plays_fresh_worlds_the_same_tasks_each_time(tiny_policy_dir, tmp_path, monkeypatch):
    played = []
    real_make_env = groups.make_env

    def recording_make_env(bundle, task, *args, **kwargs):
        played.append((bundle.world_seed, task.task_id))
        return real_make_env(bundle, task, *args, **kwargs)

    monkeypatch.setattr(groups, "make_env", recording_make_env)
    trainer = GRPOTrainer(config(tiny_policy_dir, tmp_path, "trainer.val_every=1", "trainer.val_tasks=4",
                                 "trainer.val_heldout=true", "env.splits.validation=0"))
    trainer.train()
    start, after = played[:4], played[-4:]
    assert start == after  # a curve: the same tasks before and after the step
    training_seed = trainer.groups.bundle.world_seed
    assert all(seed >= 2 * 10**9 for seed, _ in start) and training_seed < 10**9  # validation worlds only
    families = {task.family for _, task in trainer.groups.validation_tasks}
    bundle = trainer.groups.bundle
    trained = {task.family for split in ("covered_seen", "uncovered_seen") for task in bundle.splits[split]}
    assert families <= trained  # the training families, in worlds never trained on


def test_validating_without_validation_tasks_is_refused(tiny_policy_dir, tmp_path):
    with pytest.raises(ConfigError, match=r"trainer.val_every=2 needs validation tasks.*env.splits.validation=0"):
        config(tiny_policy_dir, tmp_path, "trainer.val_every=2", "env.splits.validation=0")
