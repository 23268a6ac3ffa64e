"""Fixtures for the policy-backend tests: the real τ-bench domain and its tokenizer corpus."""
from __future__ import annotations

import pytest

from agentgrpo.envs.airline import load_tau_bench
from agentgrpo.policy.tokenizer import domain_corpus


@pytest.fixture(scope="session")
def domain(tau_bench_dir):
    return load_tau_bench(tau_bench_dir)


@pytest.fixture(scope="session")
def corpus(domain) -> list[str]:
    return domain_corpus(domain)
