"""Small, fast settings shared by the training, rollout and quickstart tests."""
from __future__ import annotations

SMALL_ENV_OVERRIDES = [
    "env.n_tasks=12",
    "env.splits.covered_seen=4",
    "env.splits.uncovered_seen=4",
    "env.splits.unseen=4",
]


def small_env_config(**overrides):
    from agentgrpo.envs.airline.factory import EnvConfig, SplitConfig

    return EnvConfig(n_tasks=12, splits=SplitConfig(covered_seen=4, uncovered_seen=4, unseen=4), **overrides)


