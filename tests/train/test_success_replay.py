"""trainer.success_coef: the policy's own earlier successful write episodes replayed as an NLL term."""
from __future__ import annotations

import json

import pytest
import torch
from helpers import fast_grpo_config

from agentgrpo.agent.masking import IGNORE_INDEX
from agentgrpo.agent.types import Trajectory
from agentgrpo.config import ConfigError
from agentgrpo.envs.types import Step
from agentgrpo.train.demo_replay import SuccessReplay, episode_example
from agentgrpo.train.grpo import GRPOTrainer

from .test_demo_replay import sgd_trainer, weights_after_nll_term
from .test_grpo import synthetic_trajectories

WRITES = frozenset({"cancel_reservation"})


def episode(tokens: list[int], mask: list[int], reward: float, *steps: Step) -> Trajectory:
    traj = Trajectory(task_id="t", group_id="g", token_ids=tokens, response_mask=mask, outcome_reward=reward)
    traj.steps = list(steps)
    return traj


CANCEL = Step("tool", "cancel_reservation", {"reservation_id": "R1"}, '{"status": "cancelled"}', error=False)
REFUSED = Step("tool", "cancel_reservation", {"reservation_id": "R1"}, "Error: not allowed", error=True)
READ = Step("tool", "get_reservation_details", {"reservation_id": "R1"}, "{}", error=False)


def test_only_successful_episodes_that_executed_a_write_are_kept():
    replay = SuccessReplay(capacity=8, batch_size=2, seed=0, write_tools=WRITES)
    added = replay.add([
        episode([1, 2, 3, 4], [0, 1, 1, 0], 1.0, READ, CANCEL),   # kept
        episode([1, 5], [0, 1], 1.0, READ),                       # succeeded without a write
        episode([1, 6], [0, 1], 0.0, CANCEL),                     # wrote, failed
        episode([1, 7], [0, 1], 1.0, REFUSED),                    # the write was refused by the tool
    ])
    assert added == 1 and len(replay.buffer) == 1
    kept = replay.buffer[0]
    assert kept.input_ids == [1, 2, 3, 4] and kept.labels == [IGNORE_INDEX, 2, 3, IGNORE_INDEX]


def test_the_buffer_keeps_the_latest_and_draws_by_step_and_update():
    replay = SuccessReplay(capacity=3, batch_size=2, seed=5, write_tools=WRITES)
    assert replay.draw(0, 0) == []  # nothing yet: no term
    replay.add([episode([1, t], [0, 1], 1.0, CANCEL) for t in range(10, 14)])
    assert [e.input_ids[1] for e in replay.buffer] == [11, 12, 13]  # the oldest left
    again = SuccessReplay(capacity=3, batch_size=2, seed=5, write_tools=WRITES)
    again.load_state_dict(replay.state_dict())
    assert [e.input_ids for e in again.draw(4, 1)] == [e.input_ids for e in replay.draw(4, 1)]
    draws = {tuple(e.input_ids[1] for e in replay.draw(step, update)) for step in range(4) for update in range(3)}
    assert len(draws) > 1 and all(len(set(d)) == 2 for d in draws)  # varies, without replacement


def test_update_adds_success_coef_times_the_own_episodes_nll_gradient(tiny_policy_dir, tmp_path):
    trainer = sgd_trainer(tiny_policy_dir, tmp_path, "trainer.success_coef=0.5", "trainer.success_batch_size=2")
    trajectories = synthetic_trajectories(trainer.groups.chat.pad_token_id)
    trainer.success_replay.buffer.extend(episode_example(t) for t in trajectories[:3])
    batch, _ = trainer.compute_advantages(trajectories)
    plan = trainer.plan_updates(batch, step=3)
    trainer.compute_old_logprobs(batch, plan)
    replayed = trainer.success_replay.draw(3, 0)
    assert len(replayed) == 2
    expected, nll = weights_after_nll_term(trainer, batch, replayed, 0.5)  # labelled on the responses only

    metrics = trainer.update(batch, plan, step=3)
    assert metrics["loss/success_nll"] == pytest.approx(nll, rel=1e-5)
    for got, want in zip(trainer.model.parameters(), expected):
        torch.testing.assert_close(got.detach(), want, atol=2e-6, rtol=1e-5)


def test_a_run_logs_the_term_and_its_buffer_survives_a_resume(tiny_policy_dir, tmp_path):
    config = fast_grpo_config(tiny_policy_dir, tmp_path, "trainer.success_coef=0.3", "trainer.steps=1",
                              "trainer.save_every=1")
    trainer = GRPOTrainer(config)
    seeded = episode_example(synthetic_trajectories(trainer.groups.chat.pad_token_id)[0])
    trainer.success_replay.buffer.append(seeded)
    trainer.train()
    record = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert record["loss/success_nll"] > 0 and record["rollout/success_buffer"] >= 1
    saved = [e.input_ids for e in trainer.success_replay.buffer]
    resumed = GRPOTrainer(fast_grpo_config(tiny_policy_dir, tmp_path, "trainer.success_coef=0.3", "trainer.steps=2",
                                           "trainer.save_every=1"), resume=True)
    assert resumed.start_step == 1 and [e.input_ids for e in resumed.success_replay.buffer] == saved
    assert saved[0] == seeded.input_ids


def test_bad_settings_name_their_key(tiny_policy_dir, tmp_path):
    with pytest.raises(ConfigError, match="trainer.success_coef"):
        fast_grpo_config(tiny_policy_dir, tmp_path, "trainer.success_coef=-1")
    with pytest.raises(ConfigError, match="trainer.success_batch_size"):
        fast_grpo_config(tiny_policy_dir, tmp_path, "trainer.success_batch_size=0")
    with pytest.raises(ConfigError, match="trainer.success_buffer"):
        fast_grpo_config(tiny_policy_dir, tmp_path, "trainer.success_buffer=0")
    with pytest.raises(ConfigError, match="trainer.success_coef=0"):
        SuccessReplay(capacity=1, batch_size=1, seed=0, write_tools=frozenset())
