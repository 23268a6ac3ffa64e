"""Group advantages, length normalisers, Turn-Discount weights and token advantages."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgrpo.algos import (
    group_advantages,
    group_stats,
    length_normalizer,
    token_advantages,
    turn_credit_tokens,
    turn_discount_weights,
)

from . import oracles


# ---------------------------------------------------------------- group advantages
def test_group_advantages_by_hand():
    # group a = [1, 0, 1]: mean 2/3, population var = (2·(1/3)² + (2/3)²)/3 = 2/9, std = √2/3
    # A = (1/3)/(√2/3) = 1/√2 and (−2/3)/(√2/3) = −√2; group b is a singleton: A = 0
    adv = group_advantages(torch.tensor([1.0, 0.0, 1.0, 1.0]), ["a", "a", "a", "b"])
    std = math.sqrt(2) / 3
    expected = [(1 / 3) / (std + 1e-6), (-2 / 3) / (std + 1e-6), (1 / 3) / (std + 1e-6), 0.0]
    assert adv.tolist() == pytest.approx(expected, rel=1e-6)
    assert adv[0].item() == pytest.approx(1 / math.sqrt(2), rel=1e-5)


def test_dr_grpo_advantages_by_hand():
    scores, groups = torch.tensor([1.0, 0.0, 1.0, 1.0]), ["a", "a", "a", "b"]
    adv = group_advantages(scores, groups, norm_by_std=False)
    assert adv.tolist() == pytest.approx([1 / 3, -2 / 3, 1 / 3, 0.0], abs=1e-7)


def test_group_ids_as_int_tensor_and_numpy_strings_agree():
    scores = torch.tensor([0.2, 0.9, 0.4, 0.4, 0.1])
    from_list = group_advantages(scores, ["x", "y", "x", "y", "z"])
    from_tensor = group_advantages(scores, torch.tensor([7, 3, 7, 3, 11]))
    from_numpy = group_advantages(scores, np.array(["x", "y", "x", "y", "z"], dtype=object))
    assert torch.equal(from_list, from_tensor) and torch.equal(from_list, from_numpy)


def test_identical_scores_give_exact_zero():
    # 0.3 is not exactly representable: a naive (x − mean)/(std + ε) leaks rounding noise / ε
    adv = group_advantages(torch.tensor([0.3] * 7 + [0.7, 0.7]), [0] * 7 + [1, 1])
    assert torch.equal(adv, torch.zeros(9))


def test_singleton_groups_only():
    adv = group_advantages(torch.tensor([1.0, 0.0, 5.0]), ["a", "b", "c"])
    assert torch.equal(adv, torch.zeros(3))


def test_group_stats_by_hand():
    scores = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0])
    ids = ["g0", "g0", "g1", "g1", "g2", "g2", "g3"]  # all-1, all-0, mixed, singleton (=1)
    stats = group_stats(scores, ids)
    assert stats == {"num_groups": 4, "singleton_groups": 1, "zero_spread_groups": 2,
                     "all_zero_groups": 1, "all_one_groups": 2}
    adv, same = group_advantages(scores, ids, return_stats=True)
    assert same == stats
    assert adv.tolist()[:4] == [0.0] * 4 and adv[6].item() == 0.0


def test_group_advantages_bfloat16_and_wrong_shapes():
    adv = group_advantages(torch.tensor([1.0, 0.0], dtype=torch.bfloat16), [0, 0])
    assert adv.dtype == torch.float32 and adv.tolist() == pytest.approx([1.0, -1.0], rel=1e-5)
    with pytest.raises(ValueError, match="entries"):
        group_advantages(torch.tensor([1.0, 0.0]), [0])
    with pytest.raises(ValueError, match=r"shape \[B\]"):
        group_advantages(torch.ones(2, 3), [0, 0])


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_group_advantages_reject_non_finite_scores(bad):
    # before: NaN silently zeroed its group, +inf gave NaN advantages
    scores = torch.tensor([1.0, 0.0, bad, 1.0])
    with pytest.raises(ValueError, match=r"finite.*rows \[2\]"):
        group_advantages(scores, [0, 0, 1, 1])
    with pytest.raises(ValueError, match="finite"):
        group_advantages(scores, [0, 0, 1, 1], norm_by_std=False, return_stats=True)
    with pytest.raises(ValueError, match="finite"):
        group_stats(scores, [0, 0, 1, 1])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.floats(-5, 5, allow_nan=False, width=32)),
                min_size=1, max_size=12),
       st.booleans())
def test_group_advantages_match_oracle_and_sum_to_zero(pairs, norm_by_std):
    groups = [g for g, _ in pairs]
    scores = [s for _, s in pairs]
    adv = group_advantages(torch.tensor(scores, dtype=torch.float64), groups, norm_by_std)
    expected = oracles.group_advantages(scores, groups, norm_by_std)
    assert adv.tolist() == pytest.approx(expected, rel=1e-9, abs=1e-9)
    for g in set(groups):
        members = [i for i, x in enumerate(groups) if x == g]
        assert abs(sum(adv[i].item() for i in members)) < 1e-6 * max(1.0, len(members))


# ---------------------------------------------------------------- length normaliser
def test_length_normalizer_by_hand():
    mask = torch.tensor([[1, 1, 1, 1], [0, 1, 0, 0], [0, 0, 0, 0]])
    assert length_normalizer(mask, "linear").tolist() == [0.25, 1.0, 1.0]
    assert length_normalizer(mask, "sqrt").tolist() == [0.5, 1.0, 1.0]
    assert length_normalizer(mask, "none").tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="linear"):
        length_normalizer(mask, "cubic")


# ---------------------------------------------------------------- turn discount
def test_turn_discount_token_unit_by_hand():
    # active tokens k = 0, 1, 2 get α^(2−k) = 4, 2, 1 (α = 2); mean 7/3 → 12/7, 6/7, 3/7
    w = turn_discount_weights(torch.tensor([[0, 1, 1, 0, 1]]), alpha=2.0)
    assert w.tolist()[0] == pytest.approx([0.0, 12 / 7, 6 / 7, 0.0, 3 / 7], rel=1e-6)


def test_turn_discount_turn_unit_by_hand():
    # turns: {0,1}, {3}, {5}; J = 3, weights α^(2−j) = 4, 2, 1 per token (α = 2)
    # sum over the 4 active tokens = 4+4+2+1 = 11, mean 11/4 → 16/11, 16/11, 8/11, 4/11
    w = turn_discount_weights(torch.tensor([[1, 1, 0, 1, 0, 1]]), alpha=2.0, unit="turn")
    assert w.tolist()[0] == pytest.approx([16 / 11, 16 / 11, 0, 8 / 11, 0, 4 / 11], rel=1e-6)


def test_turn_discount_long_sequence_is_finite_and_exact():
    length, alpha = 100_000, 1.05  # α^(L−1) ≈ 10^2119 overflows any float
    w = turn_discount_weights(torch.ones(2, length), alpha)
    assert torch.isfinite(w).all()
    assert w.double().mean().item() == pytest.approx(1.0, abs=1e-5)
    # closed form of the first weight: L·α^(L−1)·(α−1)/(α^L − 1) = L·(α−1)/(α·(1 − α^−L))
    assert w[0, 0].item() == pytest.approx(length * (alpha - 1) / alpha, rel=1e-5)
    w_low = turn_discount_weights(torch.ones(1, length), 0.95)  # α < 1: the last token peaks
    assert torch.isfinite(w_low).all()
    assert w_low[0, -1].item() == pytest.approx(length * 0.05, rel=1e-4)


def test_turn_discount_edge_cases():
    assert torch.equal(turn_discount_weights(torch.zeros(3, 5)), torch.zeros(3, 5))
    assert turn_discount_weights(torch.tensor([[0, 0, 1]])).tolist() == [[0.0, 0.0, 1.0]]  # L = 1
    assert torch.allclose(turn_discount_weights(torch.ones(1, 6), alpha=1.0), torch.ones(1, 6))
    bf16 = turn_discount_weights(torch.ones(2, 50, dtype=torch.bfloat16), 1.05, "turn")
    assert bf16.dtype == torch.float32 and torch.isfinite(bf16).all()
    with pytest.raises(ValueError):
        turn_discount_weights(torch.ones(1, 3), alpha=0.0)
    with pytest.raises(ValueError, match="turn"):
        turn_discount_weights(torch.ones(1, 3), unit="step")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 1), min_size=9, max_size=9), min_size=1, max_size=4),
       st.floats(0.5, 3.0), st.sampled_from(["token", "turn"]))
def test_turn_discount_matches_oracle_and_averages_one(rows, alpha, unit):
    w = turn_discount_weights(torch.tensor(rows), alpha, unit)
    for b, row in enumerate(rows):
        expected = oracles.turn_discount(row, alpha, unit)
        assert w[b].tolist() == pytest.approx(expected, rel=1e-5, abs=1e-6)
        if sum(row):
            active = [w[b, t].item() for t in range(9) if row[t]]
            assert sum(active) / len(active) == pytest.approx(1.0, rel=1e-5)


# ---------------------------------------------------------------- token advantages
def test_token_advantages_vanilla_and_lata_by_hand():
    mask = torch.tensor([[1, 1, 1, 1, 0], [0, 1, 0, 0, 0]])
    adv = torch.tensor([2.0, -3.0])
    vanilla = token_advantages(adv, mask, "linear")  # 2/4 on 4 tokens, −3/1 on 1 token
    assert vanilla.tolist() == [[0.5, 0.5, 0.5, 0.5, 0.0], [0.0, -3.0, 0.0, 0.0, 0.0]]
    lata = token_advantages(adv, mask, "sqrt")  # 2/√4 = 1
    assert lata.tolist() == [[1.0, 1.0, 1.0, 1.0, 0.0], [0.0, -3.0, 0.0, 0.0, 0.0]]


def test_token_advantages_with_turn_discount_by_hand():
    # L = 3, α = 2: w = 12/7, 6/7, 3/7; A/L = 1/3 → 4/7, 2/7, 1/7
    out = token_advantages(torch.tensor([1.0]), torch.tensor([[1, 1, 1]]), "linear", 2.0)
    assert out.tolist()[0] == pytest.approx([4 / 7, 2 / 7, 1 / 7], rel=1e-6)


def test_turn_credit_by_hand():
    # rows 0, 1 share a group; row 0 has turns {0,1},{3}; row 1 has one turn {1,2}
    mask = torch.tensor([[1, 1, 0, 1], [0, 1, 1, 0]])
    credit = torch.tensor([[0.4, -0.2], [0.0, 9.0]])  # 9.0: row 1 has no turn 1 → ignored
    # turn 0 mean over both rows = 0.2 → c = 0.2, −0.2; turn 1 only row 0 has it → c = 0
    tokens = turn_credit_tokens(credit, mask, ["g", "g"])
    oracles.assert_close(tokens, [[0.2, 0.2, 0.0, 0.0], [0.0, -0.2, -0.2, 0.0]])
    # Â = (A + β c)·n(L)·w with β = 0.5, sqrt norm: row 0 L = 3, row 1 L = 2, A = (1, −1)
    out = token_advantages(torch.tensor([1.0, -1.0]), mask, "sqrt", turn_credit=credit,
                           group_ids=["g", "g"], turn_credit_coef=0.5)
    r0 = [(1 + 0.1) / math.sqrt(3)] * 2 + [0.0, 1 / math.sqrt(3)]
    r1 = [0.0, (-1 - 0.1) / math.sqrt(2), (-1 - 0.1) / math.sqrt(2), 0.0]
    oracles.assert_close(out, [r0, r1], rel=1e-6)


def test_turn_credit_mask_excludes_entries_from_the_mean():
    mask = torch.tensor([[1, 0, 1], [1, 0, 1], [1, 0, 1]])
    credit = torch.tensor([[1.0, 0.0], [3.0, 0.0], [float("nan"), 0.0]])
    present = torch.tensor([[1, 1], [1, 1], [0, 1]])  # row 2's turn 0 has no score (NaN pad)
    tokens = turn_credit_tokens(credit, mask, [0, 0, 0], present)
    assert tokens[:, 0].tolist() == pytest.approx([-1.0, 1.0, 0.0])  # mean of 1, 3 = 2


def test_turn_credit_needs_group_ids():
    with pytest.raises(ValueError, match="group_ids"):
        token_advantages(torch.ones(1), torch.ones(1, 2), turn_credit=torch.ones(1, 1),
                         turn_credit_coef=0.3)


@settings(max_examples=50, deadline=None)
@given(st.data())
def test_token_advantages_match_oracle(data):
    batch = data.draw(st.integers(1, 4))
    rows = data.draw(st.lists(st.lists(st.integers(0, 1), min_size=8, max_size=8),
                              min_size=batch, max_size=batch))
    groups = data.draw(st.lists(st.integers(0, 1), min_size=batch, max_size=batch))
    adv = data.draw(st.lists(st.floats(-2, 2, width=32), min_size=batch, max_size=batch))
    credit = data.draw(st.lists(st.lists(st.floats(-1, 1, width=32), min_size=3, max_size=3),
                                min_size=batch, max_size=batch))
    norm = data.draw(st.sampled_from(["linear", "sqrt", "none"]))
    alpha = data.draw(st.sampled_from([None, 1.05, 1.5]))
    unit = data.draw(st.sampled_from(["token", "turn"]))
    f64 = torch.float64
    out = token_advantages(torch.tensor(adv, dtype=f64), torch.tensor(rows), norm, alpha,
                           turn_discount_unit=unit, turn_credit=torch.tensor(credit, dtype=f64),
                           group_ids=groups, turn_credit_coef=0.3)
    expected = oracles.token_advantages(adv, rows, norm, alpha, unit, credit, None, groups, 0.3)
    oracles.assert_close(out, expected, rel=1e-5, abs=1e-6)


def test_token_advantages_edge_cases_are_finite():
    mask = torch.zeros(3, 6)
    assert torch.equal(token_advantages(torch.ones(3), mask, "sqrt", 1.05), torch.zeros(3, 6))
    long_mask = torch.ones(2, 100_000, dtype=torch.bfloat16)
    out = token_advantages(torch.tensor([1.0, -1.0], dtype=torch.bfloat16), long_mask, "sqrt", 1.05)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    assert out[0].double().sum().item() == pytest.approx(math.sqrt(100_000), rel=1e-4)  # Σ w = L
