"""Episodes with a NaN or infinite reward are left out of the GRPO batch and counted."""
from __future__ import annotations

import json
import math

import pytest
from helpers import SMALL_ENV_OVERRIDES

from agentgrpo.agent.types import Trajectory
from agentgrpo.config import load_config
from agentgrpo.train.batch import drop_unusable
from agentgrpo.train.grpo import GRPOTrainer
from agentgrpo.train.grpo_config import GRPOConfig


def episode(outcome: float, total: float | None = None, turn_scores: tuple[float, ...] = ()) -> Trajectory:
    traj = Trajectory(task_id="t", group_id="g", outcome_reward=outcome, turn_process_scores=list(turn_scores))
    if total is not None:
        traj.info["total_reward"] = total
    return traj


def test_drop_non_finite_by_hand():
    batch = [episode(1.0, 1.1), episode(math.nan), episode(0.0, math.inf), episode(1.0, 1.0, (0.1, math.nan)),
             episode(0.0, -math.inf), episode(0.0, 0.05, (0.1, 0.2))]
    kept, dropped = drop_unusable(batch)
    assert kept == [batch[0], batch[5]] and (dropped.non_finite, dropped.aborted, dropped.skipped_groups) == (4, 0, 0)
    kept, dropped = drop_unusable(batch[:1])
    assert kept == [batch[0]] and dropped.non_finite == 0
    assert drop_unusable([])[0] == []
    with pytest.raises(ValueError, match="all 2 episodes"):
        drop_unusable(batch[1:3])


class NaNGraderTrainer(GRPOTrainer):
    """A trainer whose grader returns NaN for the first episode of every step."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        collect_rollouts = self.groups.collect_rollouts

        def collect_with_a_nan(step: int, *args, **kwargs) -> list[Trajectory]:
            trajectories = collect_rollouts(step, *args, **kwargs)
            trajectories[0].outcome_reward = math.nan
            return trajectories

        self.groups.collect_rollouts = collect_with_a_nan


def test_a_nan_reward_episode_is_excluded_and_counted(tiny_policy_dir, tmp_path):
    config = load_config(GRPOConfig, [
        "experiment=joint", *SMALL_ENV_OVERRIDES, f"policy.init={tiny_policy_dir}", f"run_dir={tmp_path}",
        "rollout.max_turns=2", "rollout.max_new_tokens=8", "rollout.max_total_tokens=900",
        "trainer.steps=1", "trainer.tasks_per_step=2", "trainer.group_size=2", "trainer.mini_batch_size=2",
        "trainer.micro_batch_size=1", "logging.progress=false",
    ], defaults="grpo.yaml")
    trainer = NaNGraderTrainer(config)
    trainer.train()
    [record] = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert record["reward/non_finite"] == 1.0
    # the three finite episodes are trained on and reported: nothing downstream is NaN
    finite = {k: v for k, v in record.items() if isinstance(v, float)}
    assert all(math.isfinite(v) for v in finite.values()), [k for k, v in finite.items() if not math.isfinite(v)]
    assert 0 <= record["reward/outcome_mean"] <= 1
