"""Interval arithmetic of agentgrpo.eval.stats against hand-computed values."""
from __future__ import annotations

import math

import numpy as np
import pytest

from agentgrpo.eval.stats import (
    Estimate,
    auroc,
    bootstrap_mean,
    bootstrap_p_value,
    bootstrap_stratified,
    holm_adjust,
    mean_over_seeds,
    paired_difference,
    t_quantile_975,
)


def test_bootstrap_mean_of_a_constant_has_zero_width():
    est = bootstrap_mean([0.5] * 40)
    assert (est.value, est.low, est.high, est.n) == (0.5, 0.5, 0.5, 40)


def test_bootstrap_mean_interval_matches_the_normal_approximation():
    # 100 tasks, 30 solved: mean 0.3, standard error sqrt(0.3·0.7/100) = 0.0458
    values = [1.0] * 30 + [0.0] * 70
    est = bootstrap_mean(values, resamples=4000)
    assert est.value == pytest.approx(0.3)
    assert est.low == pytest.approx(0.3 - 1.96 * 0.0458, abs=0.015)
    assert est.high == pytest.approx(0.3 + 1.96 * 0.0458, abs=0.015)


def test_bootstrap_is_reproducible_and_depends_on_the_seed():
    values = np.linspace(0, 1, 37).tolist()
    assert bootstrap_mean(values, seed=3) == bootstrap_mean(values, seed=3)
    assert bootstrap_mean(values, seed=3) != bootstrap_mean(values, seed=4)


def test_paired_difference_uses_common_tasks_and_removes_task_variance():
    # b is a plus a constant 0.1 on every task: the paired interval is exactly 0.1 wide 0
    a = {f"t{i}": i / 50 for i in range(50)}
    b = {k: v + 0.1 for k, v in a.items()}
    b["only_b"] = 5.0
    diff = paired_difference(b, a)
    assert diff.n == 50
    assert diff.value == pytest.approx(0.1) and diff.low == pytest.approx(0.1) and diff.high == pytest.approx(0.1)
    assert diff.excludes_zero
    with pytest.raises(ValueError, match="share no task"):
        paired_difference({"x": 1.0}, {"y": 1.0})


def test_stratified_bootstrap_keeps_each_stratum_and_combines_means():
    strata = {"uncovered_seen": [1.0, 0.0, 1.0, 0.0], "unseen": [1.0] * 6}
    est = bootstrap_stratified(strata, lambda m: (24 * m["uncovered_seen"] + 10 * m["unseen"]) / 34)
    assert est.value == pytest.approx((24 * 0.5 + 10 * 1.0) / 34)
    assert est.n == 10
    # unseen is all ones in every resample, so the interval comes from uncovered_seen alone
    assert est.low >= 10 / 34 - 1e-12 and est.high <= 1.0


def test_mean_over_seeds_uses_student_t():
    est = mean_over_seeds([0.2, 0.3, 0.4])
    half = 4.303 * 0.1 / math.sqrt(3)
    assert est.value == pytest.approx(0.3)
    assert (est.low, est.high) == (pytest.approx(0.3 - half), pytest.approx(0.3 + half))
    assert mean_over_seeds([0.7]) == Estimate(0.7, 0.7, 0.7, 1)
    assert t_quantile_975(40) == 1.96
    with pytest.raises(ValueError):
        t_quantile_975(0)


def test_auroc_hand_computed():
    # successes 0.9, 0.4; failures 0.4, 0.1: pairs (0.9>0.4, 0.9>0.1, 0.4=0.4 ½, 0.4>0.1) = 3.5 / 4
    assert auroc([0.9, 0.4, 0.4, 0.1], [True, True, False, False]) == pytest.approx(0.875)
    assert auroc([0.1, 0.9], [True, False]) == 0.0
    assert math.isnan(auroc([0.3, 0.5], [True, True]))


def test_estimate_round_trips_and_formats():
    est = Estimate(0.05, -0.01, 0.11, 80)
    assert Estimate.from_dict(est.to_dict()) == est
    assert est.format(signed=True) == "+0.050 [-0.010, +0.110]"
    assert not est.excludes_zero


def test_holm_adjust_by_hand():
    # sorted 0.01, 0.02, 0.04, 0.30 of m = 4: x4, x3, x2, x1 -> 0.04, 0.06, 0.08, 0.30 (already monotone)
    assert holm_adjust({"a": 0.04, "b": 0.01, "c": 0.30, "d": 0.02}) == pytest.approx(
        {"b": 0.04, "d": 0.06, "a": 0.08, "c": 0.30})
    # monotone: 0.01 x3 = 0.03, 0.012 x2 = 0.024 -> raised to 0.03; caps at 1
    assert holm_adjust({"x": 0.01, "y": 0.012, "z": 0.9}) == pytest.approx({"x": 0.03, "y": 0.03, "z": 0.9})
    assert holm_adjust({"x": 0.6, "y": 0.7}) == pytest.approx({"x": 1.0, "y": 1.0})
    assert holm_adjust({}) == {}


def test_bootstrap_p_value_agrees_with_the_interval():
    assert bootstrap_p_value([0.0] * 10) == 1.0  # every resampled mean is 0: both sides
    assert bootstrap_p_value([1.0] * 10) == pytest.approx(2 / 2001)  # none <= 0: (0 + 1) / (B + 1), doubled
    rng = np.random.default_rng(3)
    for shift in (0.0, 0.1, 0.3):
        values = rng.normal(shift, 1.0, 200)
        p, interval = bootstrap_p_value(values), bootstrap_mean(values)
        assert (p < 0.05) == interval.excludes_zero  # the same draws: p < 0.05 iff the 95% interval excludes 0
    assert bootstrap_p_value([]) == 1.0
