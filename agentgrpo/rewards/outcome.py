"""Outcome rewards and how a process score is folded into them.

The environment's grader gives a binary outcome (1.0 when the final database and the
required outputs match the task, else 0.0). PRM-Lite adds a dense process score in
[-0.5, 0.5]; the training reward is ``outcome + coef * process`` (DESIGN §4, coef 0.3).
"""
from __future__ import annotations

import math

DEFAULT_PROCESS_COEF = 0.3
"""Weight of the process score in the training reward (the seed's 0.3)."""

SUCCESS_THRESHOLD = 1.0 - 1e-6
"""Outcome at or above this counts as a solved task (graders return 0.0 or 1.0)."""


def combine_rewards(outcome: float, process: float, coef: float = DEFAULT_PROCESS_COEF) -> float:
    """``outcome + coef * process``; rejects NaN/inf so a bad score fails loudly."""
    for name, value in (("outcome", outcome), ("process", process), ("coef", coef)):
        if not math.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value!r}")
    return float(outcome) + float(coef) * float(process)


def is_success(outcome: float) -> bool:
    """Whether an outcome reward means the task was solved (pass^k counts these)."""
    return outcome >= SUCCESS_THRESHOLD
