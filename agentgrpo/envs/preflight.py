"""Machine checks of an environment: its domain's data and, for an LLM user, that user's server.

Run first by every job that builds an environment (``agentgrpo.train.preflight``,
``agentgrpo.eval.preflight``, ``verl-prepare``).
"""
from __future__ import annotations

from agentgrpo.envs.config import EnvConfig
from agentgrpo.envs.registry import check_data
from agentgrpo.preflight import check_endpoint, check_served_model


def preflight_env(config: EnvConfig, prefix: str = "env.") -> None:
    """The domain's data complete (e.g. a τ-bench data directory); the LLM user's server reachable."""
    check_data(config, prefix)
    if config.user.kind == "llm":
        check_endpoint(config.user.base_url, f"{prefix}user.base_url")
        check_served_model(config.user.base_url, config.user.model, f"{prefix}user.model")
