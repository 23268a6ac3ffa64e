"""Dynamic sampling: groups without signal never reach the loss, generation rounds stop at the cap, a step
with no informative group makes no update, and round 0 is what a run without it samples."""
from __future__ import annotations

import json

import pytest
import torch
from helpers import SMALL_ENV_OVERRIDES

from agentgrpo.agent.types import Trajectory
from agentgrpo.config import ConfigError, load_config
from agentgrpo.envs.registry import write_tools
from agentgrpo.train.group_filter import groups_in_order, is_informative, outcomes_by_task
from agentgrpo.train.grpo import GRPOTrainer
from agentgrpo.train.grpo_config import GRPOConfig


def ds_config(policy_dir, run_dir, *overrides: str) -> GRPOConfig:
    """joint (PRM-Lite in the reward): the untrained policy's episodes all fail, and their process
    scores tie in some groups and differ in others."""
    return load_config(GRPOConfig, [
        *SMALL_ENV_OVERRIDES, f"policy.init={policy_dir}", f"run_dir={run_dir}", "experiment=joint",
        "rollout.max_turns=2", "rollout.max_new_tokens=8", "rollout.max_total_tokens=900",
        "trainer.steps=1", "trainer.tasks_per_step=2", "trainer.group_size=2", "trainer.mini_batch_size=2",
        "trainer.micro_batch_size=1", "trainer.lr=1e-3", "trainer.save_every=0", "trainer.lld_diagnostic=false",
        "trainer.dynamic_sampling=true", "trainer.max_generation_rounds=3", "logging.progress=false", *overrides,
    ], defaults="grpo.yaml")


def episode(group: str, outcome: float, total: float, task: str = "t") -> Trajectory:
    return Trajectory(task_id=task, group_id=group, outcome_reward=outcome, info={"total_reward": total})


def test_informative_groups_by_hand():
    mixed = [episode("g", 1.0, 1.2), episode("g", 0.0, 0.1)]
    process_only = [episode("h", 0.0, 0.1), episode("h", 0.0, -0.2)]
    tied = [episode("k", 1.0, 1.0), episode("k", 1.0, 1.0)]
    assert is_informative(mixed, "outcome") and is_informative(mixed, "reward")
    assert not is_informative(process_only, "outcome") and is_informative(process_only, "reward")
    assert not is_informative(tied, "outcome") and not is_informative(tied, "reward")
    assert not is_informative([episode("s", 1.0, 1.0)], "outcome")  # a group of one
    groups = groups_in_order([*process_only[:1], *mixed, process_only[1]])
    assert list(groups) == ["h", "g"] and len(groups["h"]) == 2
    assert outcomes_by_task(groups) == {"t": [0.0, 0.0, 1.0, 0.0]}


def test_saturated_groups_never_reach_the_loss_and_rounds_stop_at_the_cap(tiny_policy_dir, tmp_path):
    trainer = GRPOTrainer(ds_config(tiny_policy_dir, tmp_path, "trainer.informative_by=reward"))
    timings = {"perf/rollout_s": 0.0, "perf/score_s": 0.0}
    sampled_groups = trainer.groups.sample(0, timings, policy_is_init=True)
    kept, sampled, metrics = sampled_groups.kept, sampled_groups.sampled, sampled_groups.metrics
    groups = groups_in_order(sampled)
    informative = {gid for gid, group in groups.items() if is_informative(group, "reward")}
    filtered = set(groups) - informative
    assert filtered and informative  # both kinds were sampled: the filter had something to do
    assert metrics["rollout/filtered_groups"] == len(filtered)
    assert metrics["rollout/informative_group_frac"] == len(informative) / len(groups)
    # the same share, split by whether the group's task writes (its gold actions call a write tool)
    writes = set(write_tools(trainer.config.env))
    tasks = {task.task_id: task for world in trainer.groups.worlds for task in world.tasks()}
    kinds = {gid: any(a.name in writes for a in tasks[group[0].task_id].actions) for gid, group in groups.items()}
    for write, name in ((True, "write"), (False, "no_write")):
        ids = [gid for gid, kind in kinds.items() if kind == write]
        key = f"rollout/{name}_informative_group_frac"
        assert (metrics[key] == sum(gid in informative for gid in ids) / len(ids)) if ids else key not in metrics
    kept_groups = groups_in_order(kept)
    assert set(kept_groups) <= informative and len(kept_groups) == min(2, len(informative))
    assert metrics["rollout/informative_groups"] == len(kept_groups)
    rounds = metrics["rollout/generation_rounds"]
    assert len(groups) == 2 * rounds  # two tasks a round
    assert rounds == 3 if len(kept_groups) < 2 else rounds <= 3  # short of groups: stopped at the cap
    batch, _ = trainer.compute_advantages(kept)  # the rows the loss sees
    assert not filtered & set(batch.group_ids)
    assert batch.size == 2 * len(kept_groups) and bool((batch.seq_advantages != 0).all())


def test_a_step_without_informative_groups_makes_no_update(tiny_policy_dir, tmp_path):
    # on outcome alone every group of the untrained policy is saturated (all fail)
    trainer = GRPOTrainer(ds_config(tiny_policy_dir, tmp_path, "trainer.max_generation_rounds=2"))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    with pytest.warns(UserWarning, match="no informative group in 2 generation rounds"):
        trainer.train()
    record = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert record["rollout/generation_rounds"] == 2 and record["rollout/filtered_groups"] == 4
    assert record["rollout/informative_groups"] == 0 and record["rollout/informative_group_frac"] == 0
    assert record["algo/skipped_step_frac"] == 1.0 and "loss/total" not in record
    assert all(torch.equal(b, p) for b, p in zip(before, trainer.model.parameters()))
    assert not trainer.optimizer.state  # AdamW never stepped


def test_round_zero_is_what_a_run_without_dynamic_sampling_samples(tiny_policy_dir, tmp_path):
    plain = GRPOTrainer(ds_config(tiny_policy_dir, tmp_path / "plain", "trainer.dynamic_sampling=false"))
    dynamic = GRPOTrainer(ds_config(tiny_policy_dir, tmp_path / "ds", "trainer.informative_by=reward"))
    timings = {"perf/rollout_s": 0.0, "perf/score_s": 0.0}
    plain_groups = plain.groups.sample(0, dict(timings), policy_is_init=True)
    kept, sampled, metrics = plain_groups.kept, plain_groups.sampled, plain_groups.metrics
    assert kept == sampled and metrics["rollout/generation_rounds"] == 1 and metrics["rollout/filtered_groups"] == 0
    ds_sampled = dynamic.groups.sample(0, dict(timings), policy_is_init=True).sampled
    first_round = [t for t in ds_sampled if t.group_id in {s.group_id for s in sampled}]
    assert [(t.group_id, t.token_ids) for t in first_round] == [(t.group_id, t.token_ids) for t in sampled]


def test_dynamic_sampling_needs_groups_of_two():
    with pytest.raises(ConfigError, match="trainer.group_size"):
        load_config(GRPOConfig, ["trainer.dynamic_sampling=true", "trainer.group_size=1",
                                 "trainer.mini_batch_size=4", "trainer.micro_batch_size=4"], defaults="grpo.yaml")
