"""Outcome-reward helpers (rewards/outcome.py)."""
from __future__ import annotations

import math

import pytest
from pytest import approx

from agentgrpo.rewards.outcome import DEFAULT_PROCESS_COEF, combine_rewards, is_success


@pytest.mark.parametrize("outcome, process, coef, expected", [
    (1.0, 0.0, 0.3, 1.0),
    (1.0, 0.5, 0.3, 1.15),
    (0.0, -0.5, 0.3, -0.15),
    (0.0, 0.1, 0.0, 0.0),
    (1.0, 0.2, 1.0, 1.2),
])
def test_combine_rewards(outcome, process, coef, expected):
    assert combine_rewards(outcome, process, coef) == approx(expected)


def test_default_coefficient_is_point_three():
    assert DEFAULT_PROCESS_COEF == 0.3
    assert combine_rewards(0.0, 0.1) == approx(0.03)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_combine_rejects_non_finite(bad):
    for args in ((bad, 0.0), (0.0, bad), (0.0, 0.0, bad)):
        with pytest.raises(ValueError):
            combine_rewards(*args)


def test_is_success():
    assert is_success(1.0) and is_success(1.0 - 1e-9)
    assert not is_success(0.0) and not is_success(0.99)
