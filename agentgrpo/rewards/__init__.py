"""Rewards: outcome helpers and the PRM-Lite rule engine."""
from agentgrpo.rewards.config import PRMLiteConfig
from agentgrpo.rewards.messages import parse_messages, steps_from_messages
from agentgrpo.rewards.outcome import DEFAULT_PROCESS_COEF, combine_rewards, is_success
from agentgrpo.rewards.prm_lite import PRMLite, PRMResult

__all__ = [
    "DEFAULT_PROCESS_COEF",
    "PRMLite",
    "PRMLiteConfig",
    "PRMResult",
    "combine_rewards",
    "is_success",
    "parse_messages",
    "steps_from_messages",
]
