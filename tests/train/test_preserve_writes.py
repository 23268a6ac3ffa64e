"""trainer.preserve_writes: every update kept from lowering the likelihood of the policy's own
successful write episodes, by projection (``project``) or by LLDS anchored where they were (``hinge``)."""
from __future__ import annotations

import json

import pytest
import torch
from helpers import fast_grpo_config

from agentgrpo.config import ConfigError
from agentgrpo.train.demo_replay import Anchored, PreserveSet, episode_example
from agentgrpo.train.grpo import GRPOTrainer

from .test_demo_replay import demo_nll_by_hand, sgd_trainer, weights_after_nll_term
from .test_grpo import synthetic_trajectories


def expected_weights(trainer: GRPOTrainer, batch, preserve) -> tuple[list[torch.Tensor], float]:
    """By hand: the plain SGD step of the vanilla loss (test_grpo's hand check), then, if it lowers the
    preserve set's token-mean log-likelihood ℓ to first order, minus its component along ∇ℓ; and ⟨Δθ, ∇ℓ⟩."""
    before = [p.detach().clone() for p in trainer.model.parameters()]
    plain, _ = weights_after_nll_term(trainer, batch, preserve, 0.0)
    trainer.model.zero_grad()
    demo_nll_by_hand(trainer.model, preserve).backward()
    ascent = [-p.grad.clone() for p in trainer.model.parameters()]
    trainer.model.zero_grad()
    moves = [w - b for w, b in zip(plain, before)]
    dot = sum(float((m * a).sum()) for m, a in zip(moves, ascent))
    norm2 = sum(float((a * a).sum()) for a in ascent)
    coef = dot / norm2 if dot < 0 else 0.0
    return [b + m - coef * a for b, m, a in zip(before, moves, ascent)], dot


def run_update(tiny_policy_dir, tmp_path, preserved_rows: list[int]):
    trainer = sgd_trainer(tiny_policy_dir, tmp_path, "trainer.preserve_writes=project", "trainer.success_batch_size=2")
    trajectories = synthetic_trajectories(trainer.groups.chat.pad_token_id)
    trainer.preserve_set.buffer.extend(Anchored(episode_example(trajectories[row]), []) for row in preserved_rows)
    batch, _ = trainer.compute_advantages(trajectories)
    plan = trainer.plan_updates(batch, step=3)
    trainer.compute_old_logprobs(batch, plan)
    preserve = [kept.example for kept in trainer.preserve_set.draw(3, 0)]
    expected, dot = expected_weights(trainer, batch, preserve)
    metrics = trainer.update(batch, plan, step=3)
    return trainer, expected, dot, metrics


def test_a_step_that_lowers_the_preserve_set_is_projected_onto_its_level_set(tiny_policy_dir, tmp_path):
    # rows 1 (reward 0 in its group: pushed down) and 3 (advantage 0): the step lowers them
    trainer, expected, dot, metrics = run_update(tiny_policy_dir, tmp_path, [1, 3])
    assert dot < 0  # the case the projection is for
    assert metrics["algo/preserve_projected_frac"] == 1.0
    assert metrics["algo/preserve_first_order"] == pytest.approx(dot, rel=1e-4)
    for got, want in zip(trainer.model.parameters(), expected):
        torch.testing.assert_close(got.detach(), want, atol=2e-6, rtol=1e-5)


def test_a_step_that_raises_the_preserve_set_is_left_as_it_is(tiny_policy_dir, tmp_path):
    trainer, expected, dot, metrics = run_update(tiny_policy_dir, tmp_path, [0])  # reward 1: pushed up
    assert dot > 0 and metrics["algo/preserve_projected_frac"] == 0.0
    for got, want in zip(trainer.model.parameters(), expected):
        torch.testing.assert_close(got.detach(), want, atol=2e-6, rtol=1e-5)


def test_an_empty_preserve_set_leaves_the_plain_step(tiny_policy_dir, tmp_path):
    def updated(trainer: GRPOTrainer) -> tuple[GRPOTrainer, dict[str, float]]:
        batch, _ = trainer.compute_advantages(synthetic_trajectories(trainer.groups.chat.pad_token_id))
        plan = trainer.plan_updates(batch, step=3)
        trainer.compute_old_logprobs(batch, plan)
        return trainer, trainer.update(batch, plan, step=3)

    preserving, metrics = updated(sgd_trainer(tiny_policy_dir, tmp_path / "a", "trainer.preserve_writes=project"))
    plain, _ = updated(sgd_trainer(tiny_policy_dir, tmp_path / "b"))
    assert "algo/preserve_projected_frac" not in metrics  # nothing to preserve yet: no projection
    for got, want in zip(preserving.model.parameters(), plain.model.parameters()):
        torch.testing.assert_close(got.detach(), want.detach(), atol=0, rtol=0)


def test_hinge_adds_preserve_coef_times_the_drops_below_the_anchors(tiny_policy_dir, tmp_path):
    trainer = sgd_trainer(tiny_policy_dir, tmp_path, "trainer.preserve_writes=hinge", "trainer.preserve_coef=0.5",
                          "trainer.success_batch_size=2")
    trajectories = synthetic_trajectories(trainer.groups.chat.pad_token_id)
    examples = [episode_example(trajectories[row]) for row in (0, 2)]
    anchors = trainer._example_logprobs(examples)  # where they are now: no drop anywhere
    token = examples[0].input_ids.index(10)  # a labelled token of episode 0's response [9, 10, 11]
    anchors[0][token] += 0.3  # as if it had been 0.3 nats likelier when kept: it "fell" by 0.3
    trainer.preserve_set.buffer.extend(Anchored(e, a) for e, a in zip(examples, anchors))
    batch, _ = trainer.compute_advantages(trajectories)
    plan = trainer.plan_updates(batch, step=3)
    trainer.compute_old_logprobs(batch, plan)

    # by hand: the plain SGD step, then the term's gradient, 0.5 × (−log p(token)) / 2 episodes
    plain, _ = weights_after_nll_term(trainer, batch, examples, 0.0)
    trainer.model.zero_grad()
    ids = torch.tensor([examples[0].input_ids])
    logp = torch.log_softmax(trainer.model(input_ids=ids).logits[0, token - 1].float(), -1)[ids[0, token]]
    (-0.5 * logp / 2).backward()
    expected = [w - p.grad for w, p in zip(plain, trainer.model.parameters())]
    trainer.model.zero_grad()

    metrics = trainer.update(batch, plan, step=3)
    assert metrics["loss/preserve"] == pytest.approx(0.3 / 2, rel=1e-4)  # seq-mean-token-sum over 2 episodes
    for got, want in zip(trainer.model.parameters(), expected):
        torch.testing.assert_close(got.detach(), want, atol=2e-6, rtol=1e-5)


def test_a_run_logs_the_projection_and_its_preserve_set_survives_a_resume(tiny_policy_dir, tmp_path):
    # every update steps (the random policy's groups may carry no signal), so each one is logged
    settings = ("trainer.preserve_writes=project", "trainer.skip_zero_grad_steps=false", "trainer.save_every=1")
    config = fast_grpo_config(tiny_policy_dir, tmp_path, *settings, "trainer.steps=1")
    trainer = GRPOTrainer(config)
    seeded = Anchored(episode_example(synthetic_trajectories(trainer.groups.chat.pad_token_id)[1]), [0.0, -1.5])
    trainer.preserve_set.buffer.append(seeded)
    trainer.train()
    record = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert 0.0 <= record["algo/preserve_projected_frac"] <= 1.0 and "algo/preserve_first_order" in record
    saved = list(trainer.preserve_set.buffer)
    resumed = GRPOTrainer(fast_grpo_config(tiny_policy_dir, tmp_path, *settings, "trainer.steps=2"), resume=True)
    assert resumed.start_step == 1 and list(resumed.preserve_set.buffer) == saved
    assert saved[0] == seeded


def test_kept_episodes_carry_their_anchors_only_when_asked():
    from agentgrpo.agent.types import Turn
    from agentgrpo.envs.types import Step

    cancel = Step("tool", "cancel_reservation", {"reservation_id": "R1"}, '{"status": "cancelled"}')
    win = synthetic_trajectories(0)[0]
    win.steps, win.turns = [cancel], [Turn(4, 7, cancel)]
    kept = PreserveSet(4, 2, 0, frozenset({"cancel_reservation"}))
    assert kept.add([win, synthetic_trajectories(0)[1]]) == 1 and kept.buffer[0].anchor == []
    assert kept.add([win], lambda examples: [[-0.5] * len(e.input_ids) for e in examples]) == 1
    assert kept.buffer[1].anchor == [-0.5] * 7


def test_bad_settings_name_their_key(tiny_policy_dir, tmp_path):
    with pytest.raises(ConfigError, match="trainer.preserve_writes"):
        fast_grpo_config(tiny_policy_dir, tmp_path, "trainer.preserve_writes=yes")
    with pytest.raises(ConfigError, match="trainer.preserve_coef"):
        fast_grpo_config(tiny_policy_dir, tmp_path, "trainer.preserve_coef=-1")
    with pytest.raises(ConfigError, match="trainer.preserve_writes=off"):
        PreserveSet(1, 1, 0, frozenset())
