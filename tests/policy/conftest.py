"""Fixtures for the policy-backend tests: the generated airline domain and its tokenizer corpus.

The generated world has τ-bench's tools, policy and record shapes, so these tests need no
τ-bench data and run everywhere.
"""
from __future__ import annotations

import pytest
from helpers import small_env_config

from agentgrpo.envs.airline.factory import build_env
from agentgrpo.policy.tokenizer import domain_corpus


@pytest.fixture(scope="session")
def domain():
    return build_env(small_env_config()).domain


@pytest.fixture(scope="session")
def corpus(domain) -> list[str]:
    return domain_corpus(domain)
