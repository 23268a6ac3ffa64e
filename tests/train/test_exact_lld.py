"""Exact LLD diagnostics on a real rollout batch: old log-probs, the update's log-probs and the
after-update LLD pass see the same micro-batches (``plan_updates``), so on unchanged weights
new == old bit for bit — LLDS is exactly 0 on the first mini-batch and a step with lr = 0 logs
an LLD rate and log-prob changes of exactly 0 — with micro-batches of several rows."""
from __future__ import annotations

import json
import math

import pytest
import torch
from helpers import SMALL_ENV_OVERRIDES

from agentgrpo import metric_names as metric
from agentgrpo.config import load_config
from agentgrpo.train.grpo import GRPOTrainer
from agentgrpo.train.grpo_config import GRPOConfig
from agentgrpo.train.step_plan import disable_dropout, logprob_change, plan_updates


def llds_config(policy_dir, run_dir, *overrides: str) -> GRPOConfig:
    """Eight episodes per step (2 tasks × G = 4), two mini-batches of two micro-batches of two rows;
    the process score in the reward gives the untrained policy's episodes advantages of both signs."""
    return load_config(GRPOConfig, [
        *SMALL_ENV_OVERRIDES, f"policy.init={policy_dir}", f"run_dir={run_dir}", "experiment=llds",
        "reward.process_coef=0.3",
        "rollout.max_turns=2", "rollout.max_new_tokens=16", "rollout.max_total_tokens=900",
        "trainer.steps=1", "trainer.tasks_per_step=2", "trainer.group_size=4",
        "trainer.mini_batch_size=4", "trainer.micro_batch_size=2", "trainer.save_every=0",
        "trainer.lr=1e-3", "logging.progress=false", *overrides,
    ], defaults="grpo.yaml")


@pytest.fixture(scope="module")
def trajectories(tiny_policy_dir, tmp_path_factory):
    """One real rollout batch of the tiny policy (8 episodes of up to 2 turns), shared by the tests."""
    trainer = GRPOTrainer(llds_config(tiny_policy_dir, tmp_path_factory.mktemp("rollout")))
    trajectories = trainer.groups.collect_rollouts(0)
    trainer.groups.score(trajectories)
    return trajectories


@pytest.mark.parametrize("overrides", [[], ["policy.gradient_checkpointing=true"]], ids=["plain", "checkpointed"])
def test_first_mini_batch_sees_new_equal_old_bit_for_bit(tiny_policy_dir, tmp_path, trajectories, overrides):
    trainer = GRPOTrainer(llds_config(tiny_policy_dir, tmp_path, *overrides))
    batch, _ = trainer.compute_advantages(trajectories)
    plan = trainer.plan_updates(batch, step=0)
    assert [len(micro) for micro in plan.micro_batches] == [2, 2, 2, 2]
    assert any(len(t.turns) > 1 for t in trajectories)  # several actions per row: the action gate has work
    trainer.compute_old_logprobs(batch, plan)

    # the test has teeth: scored in other company, a row's log-probs are not bit-equal
    other = [plan.micro_batches[0][0], plan.micro_batches[-1][-1]]
    with trainer.training_mode(), torch.no_grad():
        moved = trainer._batch_logprobs(trainer.forward, batch, [other])
    assert not torch.equal(moved[other], batch.old_logprobs[other])

    metrics = trainer._mini_batch_update(batch, plan.mini_batches[0])
    assert metrics["loss/llds"] == 0.0
    assert metrics["algo/llds_gated_action_frac"] == 0.0
    assert metrics["algo/llds_penalized_token_frac"] == 0.0
    assert metrics["algo/lld_action_rate"] == 0.0
    assert metrics["algo/ppo_kl"] == 0.0 and metrics["algo/ratio_max"] == 1.0
    assert 0 < metrics["algo/llds_preserve_frac"] < 1  # both signs of A: the zeros mean something


def test_a_step_with_lr_zero_logs_exactly_zero_likelihood_change(tiny_policy_dir, tmp_path):
    config = llds_config(tiny_policy_dir, tmp_path, "trainer.lr=0", "trainer.ppo_epochs=2", "algo.kl_coef=0")
    GRPOTrainer(config).train()
    record = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    # every one of the 2 epochs × 2 mini-batches saw new == old: LLDS and the LLD rate are exactly 0
    assert record["loss/llds"] == 0.0 and record["algo/llds_gated_action_frac"] == 0.0
    assert record["algo/lld_action_rate"] == 0.0 and record["algo/ratio_max"] == 1.0
    assert record["algo/lld_rate"] == 0.0
    assert record["algo/logp_change_adv_nonneg"] == 0.0 and record["algo/logp_change_adv_neg"] == 0.0
    assert record["algo/grad_norm_max"] >= record["algo/grad_norm"] > 0  # a real gradient, not applied


def test_a_step_that_learns_moves_the_likelihood(tiny_policy_dir, tmp_path, trajectories):
    trainer = GRPOTrainer(llds_config(tiny_policy_dir, tmp_path, "trainer.lr=1e-4"))
    batch, _ = trainer.compute_advantages(trajectories)
    plan = trainer.plan_updates(batch, step=0)
    trainer.compute_old_logprobs(batch, plan)
    update = trainer.update(batch, plan)
    after = trainer.lld_diagnostics(batch, plan)
    assert update["loss/llds"] > 0  # the second mini-batch sees the first one's update
    # at a small learning rate GRPO raises the likelihood of A > 0 episodes and lowers that of
    # A < 0 ones (at 3e-3 both fall on this batch: Lazy Likelihood Displacement in one step)
    assert after["algo/logp_change_adv_neg"] < 0 < after["algo/logp_change_adv_nonneg"]
    assert 0 <= after["algo/lld_rate"] < 0.5


@pytest.mark.parametrize("skip", [False, True], ids=["adam-drifts", "skipped"])
def test_a_mini_batch_without_signal_moves_the_weights_only_through_adams_momentum(
        tiny_policy_dir, tmp_path, trajectories, skip):
    trainer = GRPOTrainer(llds_config(tiny_policy_dir, tmp_path, "trainer.lr=1e-4", "algo.kl_coef=0",
                                      "algo.llds_coef=0", f"trainer.skip_zero_grad_steps={str(skip).lower()}"))
    batch, _ = trainer.compute_advantages(trajectories)
    plan = trainer.plan_updates(batch, step=0)
    trainer.compute_old_logprobs(batch, plan)
    assert trainer.update(batch, plan)["algo/skipped_step_frac"] == 0.0  # real steps: Adam's momentum is set
    before = [p.detach().clone() for p in trainer.model.parameters()]
    adam_steps = {int(state["step"]) for state in trainer.optimizer.state.values()}
    batch.advantages.zero_()  # every group saturated: no signal
    batch.seq_advantages.zero_()
    update = trainer._mini_batch_update(batch, plan.mini_batches[0])
    assert update["algo/grad_norm"] == 0.0 and update["algo/skipped_step_frac"] == float(skip)
    # skipped: AdamW's step count (its bias correction) does not advance either
    assert {int(state["step"]) for state in trainer.optimizer.state.values()} == (
        adam_steps if skip else {n + 1 for n in adam_steps})
    moved = [not torch.equal(b, p) for b, p in zip(before, trainer.model.parameters())]
    # AdamW without the skip: every parameter that had a gradient moves again on a zero gradient
    assert (not any(moved)) if skip else sum(moved) > len(moved) // 2


def test_plan_cuts_each_shuffled_mini_batch_into_length_sorted_micro_batches():
    lengths = torch.tensor([50, 10, 40, 30, 20, 60, 70, 5])
    plan = plan_updates(lengths, seed=3, mini_batch_size=4, micro_batch_size=2)
    permutation = torch.randperm(8, generator=torch.Generator().manual_seed(3)).tolist()
    for mini, rows in zip(plan.mini_batches, (permutation[:4], permutation[4:])):
        ordered = sorted(rows, key=lambda r: lengths[r].item())
        assert mini == [ordered[:2], ordered[2:]]
    assert sorted(r for micro in plan.micro_batches for r in micro) == list(range(8))
    assert plan == plan_updates(lengths, seed=3, mini_batch_size=4, micro_batch_size=2)  # a function of the seed


def test_plan_keeps_a_short_last_mini_batch():
    plan = plan_updates(torch.tensor([3, 1, 2, 5, 4, 6]), seed=0, mini_batch_size=4, micro_batch_size=2)
    assert [len(mini) for mini in plan.mini_batches] == [2, 1]
    assert sum(len(micro) for micro in plan.micro_batches) == 6


def test_logprob_change_by_hand():
    mask = torch.tensor([[0.0, 1, 1, 0], [1, 1, 1, 1], [0, 0, 1, 1]])
    old = torch.zeros(3, 4)
    new = torch.tensor([[9.0, -0.5, 0.1, 9], [0.2, 0.2, 0.2, 0.2], [9, 9, -1.0, -2.0]])
    # rows 0 and 1 have A ≥ 0: (-0.5 + 0.1 + 4 × 0.2) / 6; row 2 has A < 0: (-1 - 2) / 2
    change = logprob_change(new, old, torch.tensor([0.0, 1.0, -1.0]), mask)
    assert change["algo/logp_change_adv_nonneg"] == pytest.approx(0.4 / 6)
    assert change["algo/logp_change_adv_neg"] == pytest.approx(-1.5)
    assert math.isnan(logprob_change(new, old, torch.tensor([1.0, 1.0, 1.0]), mask)["algo/logp_change_adv_neg"])


def test_disable_dropout_zeroes_modules_and_attention_dropout():
    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attention_dropout = 0.1
            self.drop = torch.nn.Dropout(0.3)

    model = torch.nn.Sequential(Attention(), torch.nn.Dropout2d(0.5), torch.nn.Linear(2, 2))
    disable_dropout(model)
    assert model[0].attention_dropout == 0.0 and model[0].drop.p == 0.0 and model[1].p == 0.0
    x = torch.randn(4, 2)
    model.train()
    assert torch.equal(model[0].drop(x), x)


def test_the_trainer_switches_off_loras_dropout(tiny_policy_dir, tmp_path):
    pytest.importorskip("peft", reason="LoRA needs peft: pip install 'agentgrpo[lora]'")
    trainer = GRPOTrainer(llds_config(tiny_policy_dir, tmp_path, "policy.lora.rank=4", "policy.lora.dropout=0.1"))
    dropouts = [m for m in trainer.model.modules() if isinstance(m, torch.nn.Dropout)]
    assert dropouts and all(m.p == 0.0 for m in dropouts)  # the update's forward is the sampler's


def test_seq_mean_token_sum_norm_divides_every_micro_batch_by_the_mini_batchs_horizon(
        tiny_policy_dir, tmp_path, trajectories):
    """Length-sorted micro-batches have their own widths; the loss must not depend on the cut."""
    losses = []
    for micro in (2, 4):
        trainer = GRPOTrainer(llds_config(tiny_policy_dir, tmp_path / str(micro), "trainer.lr=0",
                                          "algo.loss_agg=seq-mean-token-sum-norm", f"trainer.micro_batch_size={micro}"))
        batch, _ = trainer.compute_advantages(trajectories)
        plan = trainer.plan_updates(batch, step=0)
        trainer.compute_old_logprobs(batch, plan)
        losses.append(trainer._mini_batch_update(batch, plan.mini_batches[0])["loss/pg"])
    assert losses[0] != 0.0
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)


class CountedForward:
    """A trainer's forward with its calls counted (the real forward runs)."""

    def __init__(self, forward):
        self.forward, self.calls = forward, 0

    def token_logprobs(self, *args, **kwargs):
        self.calls += 1
        return self.forward.token_logprobs(*args, **kwargs)


@pytest.mark.parametrize("overrides", [[], ["policy.gradient_checkpointing=true"]], ids=["plain", "checkpointed"])
def test_sharing_the_first_forward_saves_passes_and_changes_no_bit(tiny_policy_dir, tmp_path, trajectories,
                                                                   overrides):
    """Two learning steps on the same batch: the first mini-batch's old log-probs from its own
    update forward, and the reference's from the policy before its first step, give the same
    weights, log-probs and metrics bit for bit as separate passes, with fewer forwards."""
    runs = []
    for share in (False, True):
        trainer = GRPOTrainer(llds_config(tiny_policy_dir, tmp_path / str(share), "algo.kl_coef=0.05", *overrides))
        trainer.share_forwards = share
        trainer.forward, trainer.reference_forward = CountedForward(trainer.forward), CountedForward(
            trainer.reference_forward)
        calls, steps = [], []
        for step in range(2):
            metrics = trainer.learn(trajectories, step, {metric.PERF_SCORE_S: 0.0})
            calls.append((trainer.forward.calls, trainer.reference_forward.calls))
            trainer.forward.calls = trainer.reference_forward.calls = 0
            steps.append((metrics, trainer.last_batch.old_logprobs, trainer.last_batch.ref_logprobs))
        runs.append((calls, steps, [p.detach().clone() for p in trainer.model.parameters()]))
    (calls_apart, steps_apart, weights_apart), (calls_shared, steps_shared, weights_shared) = runs
    # 4 micro-batches of 2 rows: old 4 + updates 4 + LLD pass 4 policy forwards, 4 reference ones
    assert calls_apart == [(12, 4), (12, 4)]
    # shared: old for the second mini-batch only (2); the reference's only once the policy moved
    # (a checkpointed policy's training forward does not share the prefix: the reference keeps its pass)
    assert calls_shared == ([(10, 4), (10, 4)] if overrides else [(10, 0), (10, 4)])
    for (metrics_a, old_a, ref_a), (metrics_s, old_s, ref_s) in zip(steps_apart, steps_shared):
        assert torch.equal(old_a, old_s) and torch.equal(ref_a, ref_s)
        assert metrics_a == metrics_s
    assert steps_apart[1][0]["loss/kl"] > 0  # the KL term is live
    assert all(torch.equal(a, s) for a, s in zip(weights_apart, weights_shared))
    assert not all(torch.equal(a, s) for a, s in zip(weights_apart, GRPOTrainer(
        llds_config(tiny_policy_dir, tmp_path / "fresh")).model.parameters()))  # the steps did learn
