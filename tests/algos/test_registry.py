"""Named advantage estimators: one signature, presets over group + token advantages."""
from __future__ import annotations

import math

import pytest
import torch

from agentgrpo.algos import (
    PRESETS,
    Advantages,
    advantage_estimator_names,
    estimator_length_norm,
    get_advantage_estimator,
    group_advantages,
    register_advantage_estimator,
    token_advantages,
)

from . import oracles

SCORES = torch.tensor([1.0, 0.0, 1.0, 0.0])  # group a = (1, 0): A = ±1/(0.5 + ε); b = (1, 0) too
GROUPS = ["a", "a", "b", "b"]
MASK = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0], [0, 1, 1, 0], [1, 0, 1, 0]])
A = 0.5 / (0.5 + 1e-6)


def _call(name, **kw):
    """(token advantages, metrics) of estimator ``name`` on the batch above."""
    advantages = get_advantage_estimator(name)(SCORES, GROUPS, MASK, **kw)
    return advantages.token, advantages.metrics


def test_builtin_names_registered():
    builtin = {"grpo", "lata", "turn_discount", "turn_discount_lata", "dr_grpo"}
    assert builtin <= set(advantage_estimator_names())


def test_grpo_and_lata_by_hand():
    grpo, _ = _call("grpo", norm_by_std=True, turn_discount_alpha=None)
    oracles.assert_close(grpo[0], [A / 4] * 4)  # A/L, L = 4
    oracles.assert_close(grpo[1], [-A, 0, 0, 0])  # L = 1
    lata, _ = _call("lata", norm_by_std=True, turn_discount_alpha=1.3)  # α ignored by lata
    oracles.assert_close(lata[0], [A / 2] * 4)  # A/√4
    oracles.assert_close(lata[2], [0, A / math.sqrt(2), A / math.sqrt(2), 0])


def test_turn_discount_presets_by_hand():
    # row 0: L = 4, α = 2 → raw 8, 4, 2, 1, mean 15/4 → w = 32/15, 16/15, 8/15, 4/15
    w = [32 / 15, 16 / 15, 8 / 15, 4 / 15]
    td, _ = _call("turn_discount", norm_by_std=True, turn_discount_alpha=2.0)
    oracles.assert_close(td[0], [A / 4 * x for x in w], rel=1e-6)
    td_lata, _ = _call("turn_discount_lata", norm_by_std=True, turn_discount_alpha=2.0)
    oracles.assert_close(td_lata[0], [A / 2 * x for x in w], rel=1e-6)
    default_alpha, _ = _call("turn_discount", norm_by_std=True, turn_discount_alpha=None)
    explicit, _ = _call("turn_discount", norm_by_std=True, turn_discount_alpha=1.05)
    assert torch.equal(default_alpha, explicit)
    by_turn, _ = _call("turn_discount", norm_by_std=True, turn_discount_alpha=2.0,
                       turn_discount_unit="turn")
    # row 3 has turns {0}, {2}: weights 2, 1, mean 1.5 → 4/3, 2/3; A/L = −A/2
    oracles.assert_close(by_turn[3], [-A / 2 * 4 / 3, 0, -A / 2 * 2 / 3, 0], rel=1e-6)


def test_dr_grpo_by_hand():
    out, _ = _call("dr_grpo", norm_by_std=True, turn_discount_alpha=1.05)  # both ignored
    oracles.assert_close(out, [[0.5] * 4, [-0.5, 0, 0, 0], [0, 0.5, 0.5, 0], [-0.5, 0, -0.5, 0]])


def test_presets_equal_their_composition_and_metrics():
    credit = torch.tensor([[0.2], [0.6], [0.0], [0.1]])
    out, metrics = _call("lata", norm_by_std=False, turn_discount_alpha=None, turn_credit=credit,
                         turn_credit_coef=0.3)
    adv = group_advantages(SCORES, GROUPS, norm_by_std=False)
    expected = token_advantages(adv, MASK, "sqrt", turn_credit=credit, group_ids=GROUPS,
                                turn_credit_coef=0.3)
    assert torch.equal(out, expected)
    assert metrics["algo/adv_mean"] == pytest.approx(0.0)
    assert metrics["algo/adv_std"] == pytest.approx(0.5)
    assert metrics["algo/adv_abs_max"] == pytest.approx(0.5)
    assert metrics["algo/groups"] == 2 and metrics["algo/groups_singleton"] == 0
    assert metrics["algo/groups_zero_spread"] == 0 and metrics["algo/saturated_group_frac"] == 0.0


def test_saturation_metrics_for_saturated_batch():
    _, _, metrics = get_advantage_estimator("grpo")(
        torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0]), [0, 0, 1, 1, 2], torch.ones(5, 3),
        norm_by_std=True, turn_discount_alpha=None)
    assert metrics["algo/groups_all_one"] == 2 and metrics["algo/groups_all_zero"] == 1
    assert metrics["algo/zero_adv_group_frac"] == 1.0 and metrics["algo/adv_abs_max"] == 0.0


def test_register_and_lookup_errors():
    @register_advantage_estimator("test_constant_one")
    def constant(scores, group_ids, response_mask, *, norm_by_std=True, turn_discount_alpha=None,
                 turn_discount_unit="token", turn_credit=None, turn_credit_mask=None,
                 turn_credit_coef=0.0, eps=1e-6):
        return Advantages(response_mask.float(), torch.ones(len(scores)), {})

    assert get_advantage_estimator("test_constant_one") is constant
    register_advantage_estimator("test_constant_one")(constant)  # same function again: fine
    with pytest.raises(ValueError, match="already registered"):
        register_advantage_estimator("test_constant_one")(lambda *a, **k: None)
    with pytest.raises(ValueError, match="lata"):
        get_advantage_estimator("ppo_gae")


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_sequence_advantages_are_the_group_advantages_of_the_preset(name):
    """The trainer takes A_b (the LLDS preserve set) from the estimator, never recomputes it."""
    for norm_by_std in (True, False):
        advantages = get_advantage_estimator(name)(SCORES, GROUPS, MASK, norm_by_std=norm_by_std, eps=0.1)
        by_std = norm_by_std and PRESETS[name].norm_by_std is not False
        assert torch.equal(advantages.sequence, group_advantages(SCORES, GROUPS, by_std, 0.1))


def test_presets_are_the_variant_table():
    assert {name: estimator_length_norm(name) for name in PRESETS} == {
        "grpo": "linear", "lata": "sqrt", "turn_discount": "linear", "turn_discount_lata": "sqrt",
        "dr_grpo": "none"}
    assert [n for n, p in PRESETS.items() if p.turn_discount] == ["turn_discount", "turn_discount_lata"]
    assert estimator_length_norm("no_such_estimator") is None
