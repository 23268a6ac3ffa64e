"""Fixtures for the PRM-Lite tests (step builders live in prm_helpers.py)."""
from __future__ import annotations

import pytest

from agentgrpo.rewards.config import PRMLiteConfig
from agentgrpo.rewards.prm_lite import PRMLite


@pytest.fixture(scope="session")
def prm() -> PRMLite:
    """The packaged airline engine with DESIGN §4's literal mean over every step.

    The rule tests compute expected scores by hand over all steps; the default
    denominator (``step_mean_over: actions``, which skips explicit think calls) is
    exercised in test_prm_antihacking.py and test_prm_properties.py.
    """
    return PRMLite(PRMLiteConfig(step_mean_over="steps"))
