"""agg_loss, the PPO-clip policy loss (token and GSPO ratios) and the KL penalties."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgrpo.algos import AGG_MODES, agg_loss, kl_penalty, policy_loss

from . import oracles

LOSS = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
MASK = [[1, 1, 0], [1, 0, 0]]


# ---------------------------------------------------------------- agg_loss
@pytest.mark.parametrize("mode, expected", [
    ("token-mean", (1 + 2 + 4) / 3),
    ("token-sum", 1 + 2 + 4),
    ("seq-mean-token-sum", ((1 + 2) + 4) / 2),
    ("seq-mean-token-mean", ((1 + 2) / 2 + 4 / 1) / 2),
    ("seq-mean-token-sum-norm", (1 + 2 + 4) / (2 * 3)),  # B · T
])
def test_agg_loss_by_hand(mode, expected):
    assert agg_loss(torch.tensor(LOSS), torch.tensor(MASK), mode).item() == pytest.approx(expected)


@pytest.mark.parametrize("mode, expected", [
    ("token-mean", 7 / 14),              # num_tokens = 14
    ("token-sum", 7.0),                  # no denominator
    ("seq-mean-token-sum", 7 / 4),       # num_seqs = 4
    ("seq-mean-token-mean", 5.5 / 4),    # (1.5 + 4) / num_seqs
    ("seq-mean-token-sum-norm", 7 / (4 * 10)),  # num_seqs · horizon
])
def test_agg_loss_explicit_denominators(mode, expected):
    out = agg_loss(torch.tensor(LOSS), torch.tensor(MASK), mode, num_tokens=14, num_seqs=4,
                   horizon=10)
    assert out.item() == pytest.approx(expected)


def test_agg_loss_empty_rows_masked_garbage_and_unknown_mode():
    loss = torch.tensor([[1.0, float("inf")], [float("nan"), 3.0], [7.0, 7.0]])
    mask = torch.tensor([[1, 0], [0, 1], [0, 0]])  # row 2 has no tokens
    for mode in AGG_MODES:
        value = agg_loss(loss, mask, mode)
        assert torch.isfinite(value), mode
    # seq-mean-token-mean: (1/1 + 3/1 + 0) / B=3
    assert agg_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx(4 / 3)
    for mode in AGG_MODES:
        assert agg_loss(torch.ones(2, 3), torch.zeros(2, 3), mode).item() == 0.0
        zero_denominators = agg_loss(torch.ones(2, 3), torch.zeros(2, 3), mode, num_tokens=0,
                                     num_seqs=0)
        assert zero_denominators.item() == 0.0
    with pytest.raises(ValueError, match="seq-mean-token-sum-norm"):
        agg_loss(torch.ones(1, 1), torch.ones(1, 1), "sequence-mean")


@pytest.mark.parametrize("name", ["num_tokens", "num_seqs", "horizon"])
@pytest.mark.parametrize("bad", [-1, -0.5, math.nan, math.inf, torch.tensor(-3.0), torch.tensor(math.nan)])
def test_agg_loss_rejects_negative_or_non_finite_denominators(name, bad):
    for mode in AGG_MODES:  # checked whatever the mode uses
        with pytest.raises(ValueError, match=name):
            agg_loss(torch.tensor(LOSS), torch.tensor(MASK), mode, **{name: bad})


def test_agg_loss_accepts_zero_and_tensor_denominators():
    loss, mask = torch.tensor(LOSS), torch.tensor(MASK)
    # a 0-d tensor denominator equals the same Python number (as the trainer passes Σ mask)
    assert agg_loss(loss, mask, "token-mean", num_tokens=torch.tensor(14.0)).item() == pytest.approx(7 / 14)
    assert agg_loss(loss, mask, "token-mean", num_tokens=0).item() == pytest.approx(7.0)  # 0 becomes 1


def test_agg_loss_keeps_gradient_off_masked_tokens():
    loss = torch.tensor(LOSS, requires_grad=True)
    agg_loss(loss, torch.tensor(MASK), "token-mean").backward()
    oracles.assert_close(loss.grad, [[1 / 3, 1 / 3, 0.0], [1 / 3, 0.0, 0.0]])


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_agg_loss_matches_oracle(data):
    row = st.lists(st.integers(0, 1), min_size=5, max_size=5)
    rows = data.draw(st.lists(row, min_size=1, max_size=4))
    values = data.draw(st.lists(st.lists(st.floats(-3, 3, width=32), min_size=5, max_size=5),
                                min_size=len(rows), max_size=len(rows)))
    mode = data.draw(st.sampled_from(AGG_MODES))
    out = agg_loss(torch.tensor(values, dtype=torch.float64), torch.tensor(rows), mode)
    assert out.item() == pytest.approx(oracles.agg(values, rows, mode), rel=1e-9, abs=1e-12)


def _micro_batched(fn, batch, splits, **global_denominators):
    """Σ over micro-batches of fn(slice) with the full batch's denominators."""
    return sum(fn(slice(a, b), **global_denominators) for a, b in splits)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_micro_batches_with_global_denominators_reproduce_full_batch(mode):
    torch.manual_seed(0)
    mask = (torch.rand(6, 5) > 0.4).long()
    mask[3] = 0  # an empty row
    full_leaf = torch.randn(6, 5, dtype=torch.float64, requires_grad=True)
    full = agg_loss(full_leaf, mask, mode)
    full.backward()
    micro_leaf = full_leaf.detach().clone().requires_grad_(True)
    denominators = dict(num_tokens=mask.sum(), num_seqs=6, horizon=5)
    micro = _micro_batched(lambda s, **kw: agg_loss(micro_leaf[s], mask[s], mode, **kw),
                           6, [(0, 2), (2, 5), (5, 6)], **denominators)
    micro.backward()
    assert micro.item() == pytest.approx(full.item(), rel=1e-12)
    assert torch.allclose(micro_leaf.grad, full_leaf.grad, rtol=1e-12, atol=0)


# ---------------------------------------------------------------- policy loss
def _hand_case():
    # ratios 1.5, 0.5, 1.1 (+ a masked token); A = 1, −1, −2
    logp = torch.tensor([[math.log(1.5), math.log(0.5), math.log(1.1), 3.0]], requires_grad=True)
    old = torch.zeros(1, 4)
    adv = torch.tensor([[1.0, -1.0, -2.0, 5.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    return logp, old, adv, mask


def test_policy_loss_by_hand():
    logp, old, adv, mask = _hand_case()
    loss, metrics = policy_loss(logp, old, adv, mask)  # ε = 0.2 both sides, seq-mean-token-sum
    # t0: −min(1.5·1, 1.2·1) = −1.2 (upper clip); t1: −min(−0.5, −0.8) = 0.8 (lower clip)
    # t2: −min(−2.2, −2.2) = 2.2 (inside the range); sum = 1.8 over one sequence
    assert loss.item() == pytest.approx(1.8, rel=1e-6)
    loss.backward()
    # only t2 is unclipped: d(−A·ρ)/dlogp = −A·ρ = 2·1.1
    assert logp.grad.tolist()[0] == pytest.approx([0.0, 0.0, 2.2, 0.0], rel=1e-6)
    assert metrics["pg_clipfrac"] == pytest.approx(2 / 3)
    assert metrics["pg_clipfrac_lower"] == pytest.approx(1 / 3)
    assert metrics["pg_clipfrac_upper"] == pytest.approx(1 / 3)
    mean_k1 = -(math.log(1.5) + math.log(0.5) + math.log(1.1)) / 3  # old − logp
    assert metrics["ppo_kl"] == pytest.approx(mean_k1, rel=1e-6)
    assert metrics["ratio_mean"] == pytest.approx(3.1 / 3, rel=1e-6)
    assert metrics["ratio_max"] == pytest.approx(1.5, rel=1e-6)
    assert all(isinstance(v, float) for v in metrics.values())
    token_mean, _ = policy_loss(logp, old, adv, mask, agg="token-mean")
    assert token_mean.item() == pytest.approx(0.6, rel=1e-6)


def test_clip_fractions_count_only_the_binding_side():
    # ratio 1.5 with A < 0 and ratio 0.5 with A > 0: the unclipped term is the min → not clipped
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.25]]))
    adv = torch.tensor([[-1.0, 1.0, 1.0]])
    loss, metrics = policy_loss(logp, torch.zeros(1, 3), adv, torch.ones(1, 3), clip_low=0.2,
                                clip_high=0.28)
    # 1.5, −0.5·... : −min(−1.5, −1.2) = 1.5; −min(0.5, 0.8) = −0.5; 1.25 < 1.28 → −1.25
    assert loss.item() == pytest.approx(1.5 - 0.5 - 1.25, rel=1e-6)
    assert metrics["pg_clipfrac"] == 0.0
    assert metrics["pg_clipfrac_lower"] == metrics["pg_clipfrac_upper"] == 0.0


def test_gspo_ratio_is_geometric_mean_and_gradient_is_token_level():
    token_log_ratios = torch.tensor([[0.1, -0.3, 0.5, 0.0], [0.05, 0.05, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    old = torch.randn(2, 4)
    logp = (old + token_log_ratios).requires_grad_(True)
    adv = torch.tensor([[1.0, 1.0, 1.0, 0.0], [-2.0, -2.0, 0.0, 0.0]])
    loss, metrics = policy_loss(logp, old, adv, mask, importance="sequence", clip_low=0.5,
                                clip_high=0.5)
    ratios = token_log_ratios.exp()
    geo = [(ratios[0, 0] * ratios[0, 1] * ratios[0, 2]).item() ** (1 / 3),
           (ratios[1, 0] * ratios[1, 1]).item() ** (1 / 2)]
    assert geo[0] == pytest.approx(math.exp(0.1), rel=1e-5)
    # every token carries its sequence's ratio: ratio_mean = (3·s0 + 2·s1)/5
    assert metrics["ratio_mean"] == pytest.approx((3 * geo[0] + 2 * geo[1]) / 5, rel=1e-5)
    # loss (seq-mean-token-sum): (−Σ_t A·s0 − Σ_t A·s1) / 2, all inside [0.5, 1.5]
    assert loss.item() == pytest.approx((-3 * geo[0] + 4 * geo[1]) / 2, rel=1e-5)
    loss.backward()
    # ∂/∂logp_t of −A·sg[s]·exp(logp_t − sg[logp_t]) = −A·s (token-level flow), ÷ B = 2
    expected = [[-geo[0] / 2] * 3 + [0.0], [geo[1]] * 2 + [0.0, 0.0]]
    oracles.assert_close(logp.grad, expected, rel=1e-5)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 1), st.floats(-1, 1, width=32)),
                         min_size=5, max_size=5), min_size=1, max_size=3))
def test_gspo_ratio_is_geometric_mean_property(rows):
    mask = torch.tensor([[m for m, _ in row] for row in rows])
    log_ratio = torch.tensor([[x for _, x in row] for row in rows], dtype=torch.float64)
    old = torch.zeros_like(log_ratio)
    # huge clip range: no clipping, so loss = −Σ_b s_b · (active tokens of b) / B with A = 1
    loss, metrics = policy_loss(log_ratio, old, torch.ones_like(old), mask, clip_low=0.999,
                                clip_high=1e9, importance="sequence")
    weighted, total_tokens = 0.0, 0
    for row in rows:
        ratios = [math.exp(x) for m, x in row if m]
        if ratios:
            geometric = math.prod(ratios) ** (1 / len(ratios))
            weighted += geometric * len(ratios)
            total_tokens += len(ratios)
    assert metrics["ratio_mean"] == pytest.approx(weighted / max(total_tokens, 1), rel=1e-9)
    assert loss.item() == pytest.approx(-weighted / len(rows), rel=1e-9, abs=1e-12)


def test_gspo_clips_whole_sequence():
    logp = torch.tensor([[0.5, 0.5]], requires_grad=True)  # s = e^0.5 ≈ 1.65 > 1.2
    loss, metrics = policy_loss(logp, torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2),
                                importance="sequence")
    loss.backward()
    assert loss.item() == pytest.approx(-2 * 1.2, rel=1e-6)
    assert logp.grad.abs().sum().item() == 0.0 and metrics["pg_clipfrac_upper"] == 1.0


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_policy_loss_matches_oracle(data):
    batch, width = data.draw(st.integers(1, 3)), 4
    rows = data.draw(st.lists(st.lists(st.integers(0, 1), min_size=width, max_size=width),
                              min_size=batch, max_size=batch))
    floats = st.floats(-0.5, 0.5, width=32)
    diffs = data.draw(st.lists(st.lists(floats, min_size=width, max_size=width),
                               min_size=batch, max_size=batch))
    advs = data.draw(st.lists(st.lists(st.floats(-2, 2, width=32), min_size=width, max_size=width),
                              min_size=batch, max_size=batch))
    mode = data.draw(st.sampled_from(AGG_MODES))
    clip_low, clip_high = data.draw(st.sampled_from([(0.2, 0.2), (0.1, 0.3)]))
    f64 = torch.float64
    old = torch.zeros(batch, width, dtype=f64)
    loss, metrics = policy_loss(torch.tensor(diffs, dtype=f64), old, torch.tensor(advs, dtype=f64),
                                torch.tensor(rows), clip_low, clip_high, agg=mode)
    per_token, clipped, lower, upper = [], 0, 0, 0
    for b in range(batch):
        row = []
        for t in range(width):
            value, was_clipped = oracles.ppo_token_loss(diffs[b][t], 0.0, advs[b][t], clip_low,
                                                        clip_high)
            row.append(value)
            if rows[b][t]:
                clipped += was_clipped
                ratio = math.exp(diffs[b][t])
                lower += ratio < 1 - clip_low and advs[b][t] < 0
                upper += ratio > 1 + clip_high and advs[b][t] > 0
        per_token.append(row)
    active = max(sum(map(sum, rows)), 1)
    assert loss.item() == pytest.approx(oracles.agg(per_token, rows, mode), rel=1e-9, abs=1e-12)
    assert metrics["pg_clipfrac"] == pytest.approx(clipped / active)
    assert metrics["pg_clipfrac_lower"] == pytest.approx(lower / active)
    assert metrics["pg_clipfrac_upper"] == pytest.approx(upper / active)
    both_sides = metrics["pg_clipfrac_lower"] + metrics["pg_clipfrac_upper"]
    assert metrics["pg_clipfrac"] == pytest.approx(both_sides)


@pytest.mark.parametrize("importance", ["token", "sequence"])
@pytest.mark.parametrize("mode", AGG_MODES)
def test_policy_loss_micro_batches_reproduce_full_batch(mode, importance):
    torch.manual_seed(1)
    mask = (torch.rand(6, 7) > 0.3).long()
    mask[2] = 0
    old = torch.randn(6, 7, dtype=torch.float64)
    adv = torch.randn(6, 7, dtype=torch.float64)
    full_leaf = (old + 0.3 * torch.randn(6, 7, dtype=torch.float64)).requires_grad_(True)
    full, _ = policy_loss(full_leaf, old, adv, mask, agg=mode, importance=importance)
    full.backward()
    leaf = full_leaf.detach().clone().requires_grad_(True)
    micro = _micro_batched(
        lambda s, **kw: policy_loss(leaf[s], old[s], adv[s], mask[s], agg=mode,
                                    importance=importance, **kw)[0],
        6, [(0, 3), (3, 4), (4, 6)], num_tokens=mask.sum(), num_seqs=6, horizon=7)
    micro.backward()
    assert micro.item() == pytest.approx(full.item(), rel=1e-12, abs=1e-15)
    assert torch.allclose(leaf.grad, full_leaf.grad, rtol=1e-12, atol=1e-15)


def test_policy_loss_edge_cases():
    # all-zero mask, L = 1, a wild old_logp, bfloat16 inputs, L = 10⁵: finite loss and grads
    cases = [
        (torch.zeros(2, 4), torch.zeros(2, 4)),
        (torch.tensor([[0, 0, 1, 0]]), torch.zeros(1, 4)),
        (torch.ones(1, 3), torch.tensor([[-1e4, 1e4, 0.0]])),
    ]
    for mask, old in cases:
        logp = torch.zeros(mask.shape, requires_grad=True)
        for importance in ("token", "sequence"):
            loss, metrics = policy_loss(logp, old, torch.ones(mask.shape), mask,
                                        importance=importance)
            loss.backward()
            assert torch.isfinite(loss) and torch.isfinite(logp.grad).all()
            assert all(math.isfinite(v) for v in metrics.values())
    logp = torch.randn(2, 100_000).to(torch.bfloat16).requires_grad_(True)
    old = (logp.detach().float() + 0.01).to(torch.bfloat16)
    loss, metrics = policy_loss(logp, old, torch.randn(2, 100_000, dtype=torch.bfloat16),
                                torch.ones(2, 100_000, dtype=torch.bfloat16))
    loss.backward()
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert logp.grad.dtype == torch.bfloat16 and torch.isfinite(logp.grad).all()


@pytest.mark.parametrize("importance", ["token", "sequence"])
def test_garbage_on_padding_gets_zero_gradient(importance):
    logp = torch.tensor([[-0.5, float("nan"), float("-inf")]], requires_grad=True)
    old = torch.tensor([[-0.4, float("nan"), 0.0]])
    loss, metrics = policy_loss(logp, old, torch.ones(1, 3), torch.tensor([[1, 0, 0]]),
                                importance=importance)
    loss.backward()
    # one active token, ratio e^−0.1 inside the clip range: ℓ = −ρ, ∂ℓ/∂logp = −ρ
    assert loss.item() == pytest.approx(-math.exp(-0.1), rel=1e-6)
    oracles.assert_close(logp.grad, [[-math.exp(-0.1), 0.0, 0.0]], rel=1e-6)
    assert metrics["ratio_max"] == pytest.approx(math.exp(-0.1), rel=1e-6)


def test_policy_loss_rejects_bad_arguments():
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="sequence"):
        policy_loss(x, x, x, x, importance="trajectory")
    with pytest.raises(ValueError, match="shape"):
        policy_loss(x, x, torch.zeros(1), x)
    with pytest.raises(ValueError, match="clip_low"):
        policy_loss(x, x, x, x, clip_low=1.0)


# ---------------------------------------------------------------- KL
def test_kl_kinds_by_hand():
    logp, ref = torch.zeros(1, 1), torch.full((1, 1), math.log(2.0))  # x = logp − ref = −ln 2
    assert kl_penalty(logp, ref, "k1").item() == pytest.approx(-math.log(2))
    assert kl_penalty(logp, ref, "k2").item() == pytest.approx(0.5 * math.log(2) ** 2)
    # k3 = e^{−x} + x − 1 = e^{ln2} − ln2 − 1
    assert kl_penalty(logp, ref, "k3").item() == pytest.approx(2 - math.log(2) - 1)
    assert kl_penalty(logp, ref, "low_var_kl").item() == pytest.approx(2 - math.log(2) - 1)
    assert kl_penalty(logp, ref, "abs").item() == pytest.approx(math.log(2))
    with pytest.raises(ValueError, match="k3"):
        kl_penalty(logp, ref, "full")


def test_k3_is_clamped_nonnegative_and_finite():
    logp = torch.tensor([[-100.0, 0.0, 0.0, -3.0]], requires_grad=True)
    ref = torch.tensor([[0.0, -100.0, 0.0, -3.5]])
    kl = kl_penalty(logp, ref, "k3")
    # x = −100: exp(min(100, 20)) − 20 − 1 ≫ 10 → 10; x = 100: e^−20 + 20 − 1 → 10
    assert kl.tolist()[0][:3] == pytest.approx([10.0, 10.0, 0.0])
    assert kl[0, 3].item() == pytest.approx(math.exp(-0.5) + 0.5 - 1, rel=1e-6)
    kl.sum().backward()
    assert torch.isfinite(logp.grad).all() and logp.grad[0, 0].item() == 0.0
    bf16 = kl_penalty(torch.randn(2, 8, dtype=torch.bfloat16),
                      torch.randn(2, 8, dtype=torch.bfloat16), "k3")
    assert bf16.dtype == torch.float32 and (bf16 >= 0).all()
