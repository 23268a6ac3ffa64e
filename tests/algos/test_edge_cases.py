"""The whole algos pipeline on the edge cases DESIGN names: no NaN or inf anywhere.

estimator → policy loss (+ KL, + LLDS) → backward, for L = 1, L = 10⁵, all-zero masks,
groups of size 1, identical scores and bfloat16 inputs, under every estimator and mode.
"""
from __future__ import annotations

import math

import pytest
import torch

from agentgrpo.algos import (
    AGG_MODES,
    advantage_estimator_names,
    agg_loss,
    get_advantage_estimator,
    kl_penalty,
    llds_loss,
    policy_loss,
)

BUILTIN = ["grpo", "lata", "turn_discount", "turn_discount_lata", "dr_grpo"]


def _case(name):
    gen = torch.Generator().manual_seed(0)
    if name == "L=1":
        mask = torch.zeros(4, 6)
        mask[:, 2] = 1
        return torch.tensor([1.0, 0.0, 1.0, 0.0]), [0, 0, 1, 1], mask, torch.float32
    if name == "L=1e5":
        return torch.tensor([1.0, 0.0]), [0, 0], torch.ones(2, 100_000), torch.float32
    if name == "all-zero masks":
        return torch.tensor([1.0, 0.0, 0.5]), [0, 0, 0], torch.zeros(3, 8), torch.float32
    if name == "groups of size 1":
        return torch.tensor([1.0, 0.0, 0.3]), ["a", "b", "c"], torch.ones(3, 8), torch.float32
    if name == "identical scores":
        mask = (torch.rand(6, 8, generator=gen) > 0.3).float()
        return torch.full((6,), 0.3), [0, 0, 0, 1, 1, 1], mask, torch.float32
    if name == "bfloat16":
        mask = (torch.rand(4, 64, generator=gen) > 0.2).to(torch.bfloat16)
        scores = torch.tensor([1.0, 0.0, 0.2, 0.9], dtype=torch.bfloat16)
        return scores, [0, 0, 1, 1], mask, torch.bfloat16
    raise KeyError(name)


CASES = ["L=1", "L=1e5", "all-zero masks", "groups of size 1", "identical scores", "bfloat16"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("estimator", BUILTIN)
def test_pipeline_is_finite(case, estimator):
    scores, groups, mask, dtype = _case(case)
    token_adv, seq_adv, adv_metrics = get_advantage_estimator(estimator)(
        scores, groups, mask, norm_by_std=True, turn_discount_alpha=1.05)
    assert torch.isfinite(seq_adv).all()
    assert torch.isfinite(token_adv).all() and all(math.isfinite(v) for v in adv_metrics.values())
    gen = torch.Generator().manual_seed(1)
    old = (-torch.rand(mask.shape, generator=gen) * 5).to(dtype)
    logp = (old.float() + 0.2 * torch.randn(mask.shape, generator=gen)).to(dtype)
    logp.requires_grad_(True)
    ref = (old.float() - 0.1).to(dtype)
    seq_adv = torch.as_tensor(scores).float() - 0.5
    # at L = 10⁵ two modes suffice (length, not the reduction, is what is under test there)
    modes = ("token-mean", "seq-mean-token-sum") if case == "L=1e5" else AGG_MODES
    for mode in modes:
        for importance in ("token", "sequence"):
            pg, pg_metrics = policy_loss(logp, old, token_adv, mask, agg=mode,
                                         importance=importance)
            kl = agg_loss(kl_penalty(logp, ref, "k3"), mask, mode)
            llds, llds_metrics = llds_loss(logp, old, seq_adv, mask, agg=mode)
            total = pg + 0.01 * kl + 0.2 * llds
            logp.grad = None
            total.backward()
            assert torch.isfinite(total), (mode, importance)
            assert logp.grad.dtype == dtype and torch.isfinite(logp.grad).all(), (mode, importance)
            assert all(math.isfinite(v) for v in {**pg_metrics, **llds_metrics}.values())


def test_saturated_cases_give_zero_policy_gradient():
    for case in ("groups of size 1", "identical scores", "all-zero masks"):
        scores, groups, mask, _ = _case(case)
        for estimator in BUILTIN:
            token_adv = get_advantage_estimator(estimator)(
                scores, groups, mask, norm_by_std=True, turn_discount_alpha=None).token
            assert torch.equal(token_adv, torch.zeros_like(token_adv)), (case, estimator)


def test_builtin_estimators_are_registered():
    assert set(BUILTIN) <= set(advantage_estimator_names())
