"""GRPO on many training worlds (env.train_worlds): tasks from every world, each run in its own."""
from __future__ import annotations

from helpers import SMALL_ENV_OVERRIDES

from agentgrpo.config import load_config
from agentgrpo.envs.episode import run_episode
from agentgrpo.envs.registry import TRAIN_SPLITS, domain_oracle, make_env
from agentgrpo.train.grpo import GRPOTrainer
from agentgrpo.train.grpo_config import GRPOConfig


def test_training_tasks_come_from_every_world_and_run_in_their_own(tiny_policy_dir, tmp_path):
    config = load_config(GRPOConfig, [
        *SMALL_ENV_OVERRIDES, "env.train_worlds=2", "env.world.n_users=60", "env.world.n_reservations=120",
        f"policy.init={tiny_policy_dir}", f"run_dir={tmp_path}", "rollout.max_turns=2", "rollout.max_new_tokens=8",
        "rollout.max_total_tokens=900", "trainer.steps=1", "trainer.tasks_per_step=2", "trainer.group_size=2",
        "trainer.mini_batch_size=2", "trainer.micro_batch_size=1", "trainer.save_every=0",
        "trainer.lld_diagnostic=false", "logging.progress=false",
    ], defaults="grpo.yaml")
    trainer = GRPOTrainer(config)
    first, second = trainer.groups.worlds
    assert first is trainer.groups.bundle and second.world_seed != first.world_seed
    assert trainer.groups.train_tasks == [*first.tasks(TRAIN_SPLITS), *second.tasks(TRAIN_SPLITS)]
    assert len(second.tasks(TRAIN_SPLITS)) > len(first.tasks(TRAIN_SPLITS))
    # a world-1 task is solvable in its own world only: the oracle succeeds there, and its user is not in world 0
    task = second.tasks(TRAIN_SPLITS)[0]
    assert trainer.groups.world_of[task.task_id] is second
    assert task.user_id not in first.domain.new_state().materialize()["users"]
    oracle = run_episode(make_env(second, task, config.env, user_seed=0), domain_oracle(config.env, second, task))
    assert oracle.reward == 1.0
    # the trainer rolls it out there (its episodes start: the user of world 1 exists for them)
    trajectories = trainer.groups.collect_rollouts(0, tasks=[task])
    assert len(trajectories) == 2 and all(t.task_id == task.task_id for t in trajectories)
