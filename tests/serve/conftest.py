"""Fixtures for the server tests: the generated airline domain (τ-bench's tools and policy shape)."""
from __future__ import annotations

import pytest
from helpers import small_env_config

from agentgrpo.envs.airline.factory import build_env


@pytest.fixture(scope="session")
def domain():
    return build_env(small_env_config()).domain
