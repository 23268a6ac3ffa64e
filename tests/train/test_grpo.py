"""The GRPO trainer: every experiment runs, LLDS activity, a hand-checked vanilla update."""
from __future__ import annotations

import json
import math

import pytest
import torch
from helpers import fast_grpo_config

from agentgrpo.agent.types import Trajectory, Turn
from agentgrpo.envs.types import Step
from agentgrpo.train.grpo import GRPOTrainer

EXPERIMENTS = ["vanilla", "turn_discount", "lata", "prm_lite", "joint", "llds", "joint_llds", "joint_turn"]




@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_runs(tiny_policy_dir, tmp_path, experiment):
    config = fast_grpo_config(tiny_policy_dir, tmp_path, f"experiment={experiment}")
    final = GRPOTrainer(config).train()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        assert math.isfinite(record["loss/total"]) and math.isfinite(record["algo/grad_norm"])
        assert record["loss/kl"] >= 0
    assert all(math.isfinite(r["loss/llds"]) and r["loss/llds"] >= 0 for r in records)
    assert all(0 <= r["reward/outcome_mean"] <= 1 for r in records)
    assert (final / "model.safetensors").is_file() and (final / "agentgrpo.json").is_file()
    assert (tmp_path / "checkpoints" / "step_000002" / "optimizer.safetensors").is_file()


@pytest.mark.parametrize(
    "overrides",
    [  # one update per rollout is rejected when the config is built (tests/test_config.py)
        ["trainer.mini_batch_size=2", "trainer.ppo_epochs=1"],  # two mini-batches
        ["trainer.mini_batch_size=4", "trainer.ppo_epochs=2"],  # two epochs
    ],
)
def test_llds_acts_after_the_first_update(tiny_policy_dir, tmp_path, overrides):
    # the untrained policy's rewards are all equal (zero advantages): an entropy bonus makes
    # the first update move the policy, so later mini-batches see the likelihood change
    config = fast_grpo_config(tiny_policy_dir, tmp_path, "experiment=llds", "algo.entropy_coef=0.05", "trainer.steps=1",
                         "trainer.lr=3e-3", "rollout.max_new_tokens=24", *overrides)
    assert config.llds_active
    GRPOTrainer(config).train()
    record = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert record["loss/llds"] > 0


def synthetic_trajectories(pad_token_id: int) -> list[Trajectory]:
    """Two groups of two: rewards (1, 0) and (1, 1); responses of 3, 2, 2, 4 tokens."""
    layouts = [([5, 6, 7, 8], [9, 10, 11]), ([5, 6, 7, 8], [12, 13]),
               ([5, 6, 20], [21, 22]), ([5, 6, 20], [23, 24, 25, 26])]
    rewards = [1.0, 0.0, 1.0, 1.0]
    trajectories = []
    for index, ((prompt, response), reward) in enumerate(zip(layouts, rewards)):
        step = Step("respond", "respond", {"content": "x"}, "ok", text="x")
        traj = Trajectory(task_id=f"t{index // 2}", group_id=f"g{index // 2}", sample_index=index % 2)
        traj.token_ids = prompt + response
        traj.response_mask = [0] * len(prompt) + [1] * len(response)
        traj.logprobs = [0.0] * len(traj.token_ids)
        traj.steps, traj.turns = [step], [Turn(len(prompt), len(prompt) + len(response), step)]
        traj.outcome_reward = reward
        traj.info["total_reward"] = reward
        trajectories.append(traj)
    return trajectories


def test_vanilla_update_equals_the_hand_checked_grpo_gradient(tiny_policy_dir, tmp_path):
    config = fast_grpo_config(tiny_policy_dir, tmp_path, "experiment=vanilla", "algo.kl_coef=0",
                         "trainer.mini_batch_size=4", "trainer.micro_batch_size=2", "trainer.tasks_per_step=2",
                         "trainer.max_grad_norm=1e9")
    trainer = GRPOTrainer(config)
    trainer.optimizer = torch.optim.SGD(trainer.model.parameters(), lr=1.0)
    trainer.scheduler = torch.optim.lr_scheduler.LambdaLR(trainer.optimizer, lambda _: 1.0)
    batch, _ = trainer.compute_advantages(synthetic_trajectories(trainer.groups.chat.pad_token_id))
    # group (1, 0): mean 0.5, std 0.5 → A = ±0.5/(0.5 + 1e-6); group (1, 1): A = 0
    a = 0.5 / (0.5 + 1e-6)
    torch.testing.assert_close(batch.seq_advantages, torch.tensor([a, -a, 0.0, 0.0]))
    plan = trainer.plan_updates(batch, step=0)
    trainer.compute_old_logprobs(batch, plan)
    before = [p.detach().clone() for p in trainer.model.parameters()]

    # by hand: ratio = 1, so loss = -(1/B) Σ_b Σ_t (A_b / L_b) · logp[b, t] and the SGD step is -∇loss
    trainer.model.zero_grad()
    logits = trainer.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1]
    logits = logits / config.rollout.temperature  # log-probs of the sampling distribution
    logp = torch.log_softmax(logits, -1).gather(-1, batch.input_ids[:, 1:, None])[..., 0]
    mask = batch.response_mask[:, 1:]
    lengths = mask.sum(dim=1)
    loss = -((batch.seq_advantages / lengths)[:, None] * logp * mask).sum() / 4
    loss.backward()
    expected = [b - p.grad for b, p in zip(before, trainer.model.parameters())]

    trainer.update(batch, plan)
    for got, want in zip(trainer.model.parameters(), expected):
        torch.testing.assert_close(got.detach(), want, atol=2e-6, rtol=1e-5)


def test_adv_std_eps_keeps_process_only_differences_small(tiny_policy_dir, tmp_path):
    config = fast_grpo_config(tiny_policy_dir, tmp_path, "experiment=joint", "algo.kl_coef=0",
                         "algo.adv_std_eps=0.1", "trainer.mini_batch_size=4", "trainer.micro_batch_size=2",
                         "trainer.tasks_per_step=2")
    trainer = GRPOTrainer(config)
    trajectories = synthetic_trajectories(trainer.groups.chat.pad_token_id)
    # group 2 both succeed; their total rewards differ only by 0.3 x a process-score gap of 0.01
    for traj, total in zip(trajectories, [1.0, 0.0, 1.003, 1.0]):
        traj.info["total_reward"] = total
    batch, _ = trainer.compute_advantages(trajectories)
    # group (1, 0): std 0.5 → ±0.5/0.6; group (1.003, 1): std 0.0015 → ±0.0015/0.1015 (not ±1)
    a, b = 0.5 / 0.6, 0.0015 / 0.1015
    torch.testing.assert_close(batch.seq_advantages, torch.tensor([a, -a, b, -b]), atol=1e-5, rtol=1e-4)


def test_constrained_rollouts_train_on_the_distribution_they_were_sampled_from(tiny_policy_dir, tmp_path):
    """rollout.constrain_tool_calls: the batch carries the sampler's masks, the recomputed old
    log-probs equal the sampler's (so the first update's ratio is 1), and a step runs through."""
    config = fast_grpo_config(tiny_policy_dir, tmp_path, "rollout.constrain_tool_calls=true",
                              "rollout.copy_arguments=true", "rollout.max_new_tokens=24", "rollout.temperature=1.0")
    trainer = GRPOTrainer(config)
    trajectories = trainer.groups.collect_rollouts(0)
    trainer.groups.score(trajectories)
    batch, _ = trainer.compute_advantages(trajectories)
    assert batch.token_masks is not None and batch.token_masks.index.shape == batch.input_ids.shape
    assert bool((batch.token_masks.index[batch.response_mask == 0] == 0).all())  # prompts: no mask
    plan = trainer.plan_updates(batch, step=0)
    trainer.compute_old_logprobs(batch, plan)
    mask = batch.response_mask.bool()
    torch.testing.assert_close(batch.old_logprobs[mask], batch.rollout_logprobs[mask], atol=2e-4, rtol=0)
    metrics = trainer._mini_batch_update(batch, plan.mini_batches[0])
    assert metrics["algo/ratio_max"] == pytest.approx(1.0, abs=1e-5)
    trainer.train()
    assert (tmp_path / "final" / "model.safetensors").is_file()
