"""What ``agentgrpo eval`` checks on the machine before its first episode.

The environment's data and LLM user; for ``policy=openai`` the evaluated server; for a
checkpoint its device and files (the generic checks are ``agentgrpo.preflight``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from agentgrpo.envs.preflight import preflight_env
from agentgrpo.policy.preflight import check_device, check_policy_source
from agentgrpo.preflight import check_endpoint, check_served_model

if TYPE_CHECKING:  # annotations only: eval.config imports torch
    from agentgrpo.eval.config import EvalConfig


def preflight_eval(config: EvalConfig, *, check_policy: bool = True) -> None:
    """Data and servers first (an unreachable one fails here, before any episode), then the model."""
    preflight_env(config.env)
    if config.policy_kind == "openai":
        check_endpoint(config.endpoint.base_url, "endpoint.base_url")
        check_served_model(config.endpoint.base_url, config.endpoint.model, "endpoint.model")
    elif config.policy_kind == "checkpoint":
        check_device(config.policy.device)
        if check_policy:
            check_policy_source(config.policy.init, "policy", "pass a checkpoint directory (e.g. runs/sft/final), "
                                "a Hub id, oracle or openai")
