"""agentgrpo in TRL: a ``GRPOTrainer`` subclass and PRM-Lite as a reward function.

* ``AgentGRPOTrainer`` / ``AgentGRPOConfig`` (``trainer``): token advantages from
  ``agentgrpo.algos`` (LATA's 1/√L, Turn-Discount) and a loss with the LLDS regulariser;
* ``PRMLiteReward`` (``rewards``): ``coef · PRM-Lite process score`` per completion;
* ``AirlineRollout``, ``airline_dataset``, ``outcome_reward`` (``airline``): multi-turn
  airline episodes through TRL's ``rollout_func`` (``examples/trl/train_airline.py``).

Install with ``pip install 'agentgrpo[trl]'`` (TRL 1.16). Exports resolve lazily, so
``from agentgrpo.integrations.trl import PRMLiteReward`` does not import TRL.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "AirlineRollout": "agentgrpo.integrations.trl.airline",
    "airline_dataset": "agentgrpo.integrations.trl.airline",
    "outcome_reward": "agentgrpo.integrations.trl.airline",
    "AgentGRPOConfig": "agentgrpo.integrations.trl.trainer",
    "AgentGRPOTrainer": "agentgrpo.integrations.trl.trainer",
    "PRMLiteReward": "agentgrpo.integrations.trl.rewards",
    "openai_transcript": "agentgrpo.integrations.trl.rewards",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'agentgrpo.integrations.trl' has no attribute {name!r}")
