"""trainer.demo_coef: the oracle's demonstrations replayed as an NLL term in GRPO's updates."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from helpers import fast_grpo_config

from agentgrpo.agent.masking import SFTExample
from agentgrpo.config import ConfigError
from agentgrpo.envs.registry import write_tools
from agentgrpo.train.demo_replay import DemoReplay, demo_write_tools
from agentgrpo.train.grpo import GRPOTrainer
from agentgrpo.train.task_sampler import is_write_task

from .test_grpo import synthetic_trajectories


def demo_nll_by_hand(model: torch.nn.Module, demos: list[SFTExample]) -> torch.Tensor:
    """Σ over every demo of Σ_t w_t·(−log p(x_t | x_<t)) over Σ w_t: the token-mean NLL, one demo at a time."""
    total, weight = torch.zeros(()), 0.0
    for demo in demos:
        ids = torch.tensor([demo.input_ids])
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
        token_logp = logp.gather(-1, ids[0, 1:, None])[:, 0]
        weights = torch.tensor(demo.label_weights()[1:], dtype=torch.float32)
        total = total - (weights * token_logp).sum()
        weight += float(weights.sum())
    return total / weight


def sgd_trainer(tiny_policy_dir, tmp_path, *overrides: str) -> GRPOTrainer:
    """A vanilla trainer (no KL, no clipping of the norm) on plain SGD at lr 1: an update moves the
    weights by exactly minus the gradient."""
    config = fast_grpo_config(tiny_policy_dir, tmp_path, "experiment=vanilla", "algo.kl_coef=0",
                              "trainer.mini_batch_size=4", "trainer.micro_batch_size=2", "trainer.tasks_per_step=2",
                              "trainer.max_grad_norm=1e9", *overrides)
    trainer = GRPOTrainer(config)
    trainer.optimizer = torch.optim.SGD(trainer.model.parameters(), lr=1.0)
    trainer.scheduler = torch.optim.lr_scheduler.LambdaLR(trainer.optimizer, lambda _: 1.0)
    return trainer


def weights_after_nll_term(trainer: GRPOTrainer, batch, examples: list[SFTExample], coef: float):
    """By hand: the weights after one SGD step on the vanilla loss of test_grpo's hand check +
    ``coef`` × the token-mean NLL of ``examples``, and that NLL."""
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.model.zero_grad()
    logits = trainer.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1]
    logp = torch.log_softmax(logits / trainer.config.rollout.temperature, -1)
    logp = logp.gather(-1, batch.input_ids[:, 1:, None])[..., 0]
    mask = batch.response_mask[:, 1:]
    pg = -((batch.seq_advantages / mask.sum(dim=1))[:, None] * logp * mask).sum() / 4
    nll = demo_nll_by_hand(trainer.model, examples)
    (pg + coef * nll).backward()
    return [b - p.grad for b, p in zip(before, trainer.model.parameters())], nll.item()


def test_update_adds_demo_coef_times_the_demonstrations_nll_gradient(tiny_policy_dir, tmp_path):
    trainer = sgd_trainer(tiny_policy_dir, tmp_path, "trainer.demo_coef=0.5", "trainer.demo_batch_size=2")
    batch, _ = trainer.compute_advantages(synthetic_trajectories(trainer.groups.chat.pad_token_id))
    plan = trainer.plan_updates(batch, step=3)
    trainer.compute_old_logprobs(batch, plan)
    demos = trainer.demo_replay.draw(3, 0)
    assert len(demos) == 2
    expected, nll = weights_after_nll_term(trainer, batch, demos, 0.5)

    metrics = trainer.update(batch, plan, step=3)
    assert metrics["loss/demo_nll"] == pytest.approx(nll, rel=1e-5)
    for got, want in zip(trainer.model.parameters(), expected):
        torch.testing.assert_close(got.detach(), want, atol=2e-6, rtol=1e-5)


def test_the_demonstration_term_alone_raises_the_demonstrations_likelihood(tiny_policy_dir, tmp_path):
    # every group's rewards agree (A = 0): the only gradient is the demonstrations'
    config = fast_grpo_config(tiny_policy_dir, tmp_path, "experiment=vanilla", "algo.kl_coef=0",
                              "trainer.mini_batch_size=4", "trainer.micro_batch_size=2", "trainer.tasks_per_step=2",
                              "trainer.demo_coef=1", "trainer.demo_batch_size=3", "trainer.lr=1e-3")
    trainer = GRPOTrainer(config)
    trajectories = synthetic_trajectories(trainer.groups.chat.pad_token_id)
    for traj in trajectories:
        traj.outcome_reward = traj.info["total_reward"] = 1.0
    batch, _ = trainer.compute_advantages(trajectories)
    assert not batch.seq_advantages.any()
    plan = trainer.plan_updates(batch, step=0)
    trainer.compute_old_logprobs(batch, plan)
    demos = trainer.demo_replay.examples
    with torch.no_grad():
        before = float(demo_nll_by_hand(trainer.model, demos))
    metrics = trainer.update(batch, plan, step=0)
    assert metrics["algo/grad_norm"] > 0 and metrics["algo/skipped_step_frac"] == 0
    with torch.no_grad():
        after = float(demo_nll_by_hand(trainer.model, demos))
    assert after < before - 1e-3


def test_draws_are_a_pure_function_of_step_and_update(tiny_policy_dir, tmp_path):
    config = fast_grpo_config(tiny_policy_dir, tmp_path, "trainer.demo_coef=0.1", "trainer.demo_batch_size=3")
    replay = GRPOTrainer(config).demo_replay
    pool = replay.examples
    # the oracle solves every task: one demonstration of each of the 4 covered_seen tasks, the splits
    # SFT demonstrates by default (the tiny preset records none)
    assert len(pool) == 4
    again = DemoReplay(pool, batch_size=3, seed=config.seed)
    assert [id(e) for e in replay.draw(2, 1)] == [id(e) for e in again.draw(2, 1)]
    draws = {tuple(id(e) for e in replay.draw(step, update)) for step in range(4) for update in range(3)}
    assert len(draws) > 1  # not one fixed batch
    assert all(len(set(d)) == 3 for d in draws)  # without replacement
    assert len(DemoReplay(pool[:2], batch_size=3, seed=0).draw(0, 0)) == 2  # a pool smaller than the batch


def test_the_replayed_splits_are_those_sft_demonstrated_unless_given(tiny_policy_dir, tmp_path):
    policy = tmp_path / "policy"
    shutil.copytree(tiny_policy_dir, policy)
    agent = json.loads((policy / "agentgrpo.json").read_text())
    (policy / "agentgrpo.json").write_text(json.dumps({**agent, "demonstrated_splits": ["uncovered_seen"]}))
    trainer = GRPOTrainer(fast_grpo_config(policy, tmp_path / "a", "trainer.demo_coef=0.1"))
    uncovered = {t.task_id for world in trainer.groups.worlds for t in world.tasks(["uncovered_seen"])}
    assert sorted(trainer.demo_replay.task_ids) == sorted(uncovered) and len(uncovered) == 4
    given = GRPOTrainer(fast_grpo_config(policy, tmp_path / "b", "trainer.demo_coef=0.1",
                                         "trainer.demo_splits=[covered_seen,uncovered_seen]"))
    assert len(given.demo_replay.examples) == 8


def test_write_only_keeps_the_write_tasks_demonstrations(tiny_policy_dir, tmp_path):
    config = fast_grpo_config(tiny_policy_dir, tmp_path, "trainer.demo_coef=0.1", "trainer.demo_tasks=write",
                              "trainer.demo_splits=[covered_seen,uncovered_seen]")
    trainer = GRPOTrainer(config)
    tools = write_tools(config.env)
    tasks = trainer.groups.train_tasks
    n_write = sum(is_write_task(t, tools) for t in tasks)
    assert 0 < n_write < len(tasks)
    assert len(trainer.demo_replay.examples) == n_write
    every = DemoReplay.collect(trainer.groups.worlds, config.env, config.trainer.task_splits, trainer.groups.chat,
                               only_write=None, batch_size=4, max_length=900, seed=config.seed)
    assert len(every.examples) == len(tasks)


def test_a_training_step_logs_the_demonstration_loss(tiny_policy_dir, tmp_path):
    config = fast_grpo_config(tiny_policy_dir, tmp_path, "trainer.demo_coef=0.2", "trainer.steps=1")
    GRPOTrainer(config).train()
    record = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert record["loss/demo_nll"] > 0  # the untrained policy: far from the demonstrations


def test_bad_settings_name_their_key(tiny_policy_dir, tmp_path):
    with pytest.raises(ConfigError, match="trainer.demo_coef"):
        fast_grpo_config(tiny_policy_dir, tmp_path, "trainer.demo_coef=-1")
    with pytest.raises(ConfigError, match="trainer.demo_batch_size"):
        fast_grpo_config(tiny_policy_dir, tmp_path, "trainer.demo_batch_size=0")
    with pytest.raises(ConfigError, match="trainer.demo_tasks"):
        fast_grpo_config(tiny_policy_dir, tmp_path, "trainer.demo_tasks=some")
    with pytest.raises(ConfigError, match="trainer.demo_splits"):
        fast_grpo_config(tiny_policy_dir, tmp_path, "trainer.demo_splits=[test]")
    with pytest.raises(ConfigError, match="trainer.demo_tasks=write"):
        demo_write_tools("write", frozenset())
    with pytest.raises(ConfigError, match="trainer.demo_coef=0"):
        DemoReplay([], batch_size=1, seed=0)


def test_the_demonstrations_must_be_the_oracle_sft_learnt_from(tiny_policy_dir, tmp_path):
    policy = tmp_path / "policy"
    shutil.copytree(tiny_policy_dir, policy)
    agent = json.loads((policy / "agentgrpo.json").read_text())
    (policy / "agentgrpo.json").write_text(json.dumps({**agent, "oracle_arithmetic": "calculator"}))
    with pytest.raises(ConfigError, match="env.oracle_arithmetic=calculator so the demonstration term"):
        GRPOTrainer(fast_grpo_config(policy, tmp_path / "a", "trainer.demo_coef=0.1"))
    trainer = GRPOTrainer(fast_grpo_config(policy, tmp_path / "b", "trainer.demo_coef=0.1",
                                           "env.oracle_arithmetic=calculator"))
    assert trainer.demo_replay.examples
    GRPOTrainer(fast_grpo_config(policy, tmp_path / "c"))  # no demonstration term: nothing to match
    (policy / "agentgrpo.json").write_text(json.dumps({**agent, "oracle_goal": True}))
    with pytest.raises(ConfigError, match="env.oracle_goal=True so the demonstration term"):
        GRPOTrainer(fast_grpo_config(policy, tmp_path / "d", "trainer.demo_coef=0.1"))
    trainer = GRPOTrainer(fast_grpo_config(policy, tmp_path / "e", "trainer.demo_coef=0.1", "env.oracle_goal=true"))
    decode = trainer.groups.chat.tokenizer.decode
    assert any("The user wants" in decode(example.input_ids) for example in trainer.demo_replay.examples)
