"""Fixtures for the integration tests: a generated airline world and an oracle driving text."""

from __future__ import annotations

from typing import Any

import pytest

from agentgrpo.agent.format import render_assistant
from agentgrpo.envs.airline import oracle_agent
from agentgrpo.envs.airline.factory import EnvConfig, build_env


@pytest.fixture(scope="session")
def env_config() -> EnvConfig:
    return EnvConfig()


@pytest.fixture(scope="session")
def bundle(env_config):
    return build_env(env_config)


class OracleWriter:
    """The oracle agent's turns as the text a policy would generate (Hermes tool calls)."""

    def __init__(self, domain: Any, task: Any) -> None:
        self.oracle = oracle_agent(domain, task)

    def turn(self, observation: str) -> str:
        action = self.oracle.act(observation)
        if action.is_respond:
            return action.kwargs["content"]
        return render_assistant(self.oracle.last_text, action.name, action.kwargs)


@pytest.fixture
def oracle_writer():
    return OracleWriter
