"""LLDS, the likelihood-preserving regulariser (DESIGN §3.7): hand values and a loop oracle."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgrpo.algos import llds_loss

from . import oracles

MASK = [[0, 1, 1, 0, 1, 1, 1, 0]]  # two actions: {1, 2} and {4, 5, 6}
OLD = [[0.0, 0.5, -0.2, 0.0, -0.1, -0.1, 0.1, 0.0]]  # Δ = old − logp with logp = 0


def _run(gate, adv=(1.0,), old=OLD, mask=MASK, **kw):
    logp = torch.zeros(len(mask), len(mask[0]), requires_grad=True)
    loss, metrics = llds_loss(logp, torch.tensor(old), torch.tensor(adv), torch.tensor(mask), gate,
                              **kw)
    loss.backward()
    return loss, metrics, logp.grad


def test_action_gate_by_hand():
    loss, metrics, grad = _run("action")
    # action 0: ΣΔ = 0.5 − 0.2 = 0.3 > 0 → gated, penalty max(0, Δ) = 0.5
    # action 1: ΣΔ = −0.1 − 0.1 + 0.1 = −0.1 → not gated; N = 5 tokens → 0.5 / 5
    assert loss.item() == pytest.approx(0.1, rel=1e-6)
    oracles.assert_close(grad, [[0, -0.2, 0, 0, 0, 0, 0, 0]])  # ∂(−logp/5) on the one token
    assert metrics == pytest.approx({"llds/gated_action_frac": 0.5,
                                     "llds/penalized_token_frac": 0.2, "llds/preserve_frac": 1.0,
                                     "lld/action_rate": 0.5, "llds/loss": 0.1})


def test_token_gate_by_hand():
    loss, metrics, grad = _run("token")
    # every token with Δ > 0 is penalised: (0.5 + 0.1) / 5
    assert loss.item() == pytest.approx(0.12, rel=1e-6)
    oracles.assert_close(grad, [[0, -0.2, 0, 0, 0, 0, -0.2, 0]])
    assert metrics["llds/gated_action_frac"] == 1.0 and metrics["lld/action_rate"] == 0.5


def test_response_gate_by_hand():
    # whole response: ΣΔ = 0.3 − 0.1 = 0.2 > 0 → both actions gated: (0.5 + 0.1) / 5
    loss, _, _ = _run("response")
    assert loss.item() == pytest.approx(0.12, rel=1e-6)
    # now make the response total negative: Δ of action 1 = −0.4, −0.1, +0.1 → Σ = 0.3 − 0.4 = −0.1
    old = [[0.0, 0.5, -0.2, 0.0, -0.4, -0.1, 0.1, 0.0]]
    loss, metrics, grad = _run("response", old=old)
    assert loss.item() == 0.0 and grad.abs().sum().item() == 0.0
    assert metrics["llds/gated_action_frac"] == 0.0 and metrics["lld/action_rate"] == 0.5


def test_negative_advantage_rows_are_outside_the_preserve_set():
    mask = MASK + [[1, 1, 1, 1, 1, 1, 1, 1]]
    old = OLD + [[5.0] * 8]  # likelihood fell a lot, but A < 0
    loss, metrics, grad = _run("action", adv=(1.0, -0.5), old=old, mask=mask)
    assert loss.item() == pytest.approx(0.1, rel=1e-6)  # N = 5: row 1's 8 tokens are not counted
    assert grad[1].abs().sum().item() == 0.0
    assert metrics["llds/preserve_frac"] == 0.5
    # A = 0 belongs to the preserve set
    loss_zero, _, _ = _run("action", adv=(0.0, -0.5), old=old, mask=mask)
    assert loss_zero.item() == pytest.approx(0.1, rel=1e-6)


def test_zero_when_policy_unchanged():
    torch.manual_seed(0)
    logp = torch.randn(4, 9, requires_grad=True)
    for gate in ("action", "token", "response"):
        loss, metrics = llds_loss(logp, logp.detach().clone(), torch.tensor([1.0, 0.0, 2.0, -1.0]),
                                  (torch.rand(4, 9) > 0.3).long(), gate)
        loss.backward()
        assert loss.item() == 0.0 and logp.grad.abs().sum().item() == 0.0
        assert metrics["lld/action_rate"] == 0.0


def test_empty_preserve_set_and_empty_masks_give_zero():
    loss, metrics, _ = _run("action", adv=(-1.0,))  # N = 0
    assert loss.item() == 0.0 and all(math.isfinite(v) for v in metrics.values())
    loss, metrics, _ = _run("action", mask=[[0] * 8])
    assert loss.item() == 0.0 and metrics["llds/penalized_token_frac"] == 0.0


def test_num_tokens_override_and_token_advantages():
    loss, _, _ = _run("action", num_tokens=10)  # 0.5 / 10
    assert loss.item() == pytest.approx(0.05, rel=1e-6)
    # a [B, T] token advantage works too: the sign of its masked row sum decides
    loss, _, _ = _run("action", adv=[[9.0, 0.1, 0.1, 9.0, 0.1, 0.1, 0.1, 9.0]])
    assert loss.item() == pytest.approx(0.1, rel=1e-6)
    with pytest.raises(ValueError, match="gate"):
        _run("turn")


def test_micro_batches_reproduce_full_batch():
    torch.manual_seed(3)
    mask = (torch.rand(6, 10) > 0.3).long()
    adv = torch.tensor([1.0, -1.0, 0.0, 0.5, -0.2, 2.0])
    old = torch.randn(6, 10, dtype=torch.float64)
    leaf = (old + 0.5 * torch.randn(6, 10, dtype=torch.float64)).requires_grad_(True)
    full, _ = llds_loss(leaf, old, adv, mask)
    full.backward()
    n_global = (mask * (adv >= 0).unsqueeze(-1)).sum()
    micro_leaf = leaf.detach().clone().requires_grad_(True)
    micro = sum(llds_loss(micro_leaf[a:b], old[a:b], adv[a:b], mask[a:b], num_tokens=n_global)[0]
                for a, b in [(0, 2), (2, 3), (3, 6)])
    micro.backward()
    assert full.item() > 0 and micro.item() == pytest.approx(full.item(), rel=1e-12)
    assert torch.allclose(micro_leaf.grad, leaf.grad, rtol=1e-12, atol=0)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_llds_matches_oracle_and_gradient_support(data):
    batch, width = data.draw(st.integers(1, 4)), 7
    rows = data.draw(st.lists(st.lists(st.integers(0, 1), min_size=width, max_size=width),
                              min_size=batch, max_size=batch))
    old = data.draw(st.lists(st.lists(st.floats(-1, 1, width=32), min_size=width, max_size=width),
                             min_size=batch, max_size=batch))
    adv = data.draw(st.lists(st.sampled_from([-1.0, 0.0, 0.7]), min_size=batch, max_size=batch))
    gate = data.draw(st.sampled_from(["action", "token", "response"]))
    logp = torch.zeros(batch, width, dtype=torch.float64, requires_grad=True)
    loss, _ = llds_loss(logp, torch.tensor(old, dtype=torch.float64), torch.tensor(adv),
                        torch.tensor(rows), gate)
    loss.backward()
    expected, touched = oracles.llds(logp.detach().tolist(), old, adv, rows, gate)
    assert loss.item() == pytest.approx(expected, rel=1e-9, abs=1e-12)
    n_preserve = sum(sum(rows[b]) for b in range(batch) if adv[b] >= 0)
    for b in range(batch):
        for t in range(width):
            # gradient only where the likelihood fell, inside a gated action of a row with A ≥ 0
            want = -1.0 / n_preserve if (b, t) in touched else 0.0
            assert logp.grad[b, t].item() == pytest.approx(want, rel=1e-9)


def test_long_and_bfloat16_inputs_are_finite():
    length = 100_000
    logp = torch.randn(2, length).to(torch.bfloat16).requires_grad_(True)
    old = (logp.detach().float() + 0.05 * torch.randn(2, length)).to(torch.bfloat16)
    mask = torch.ones(2, length, dtype=torch.bfloat16)
    mask[:, ::1000] = 0  # 100 actions per row
    loss, metrics = llds_loss(logp, old, torch.tensor([1.0, 0.0]), mask)
    loss.backward()
    assert loss.dtype == torch.float32 and torch.isfinite(loss) and loss.item() > 0
    assert logp.grad.dtype == torch.bfloat16 and torch.isfinite(logp.grad).all()
    assert all(math.isfinite(v) for v in metrics.values())
    # L = 1
    single, _ = llds_loss(torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1), torch.ones(1, 1))
    assert single.item() == 1.0
