"""Small statistics over plain lists, shared by training's rollout metrics and the evaluator.

Pure Python: no numpy, no torch, no I/O (bootstrap intervals are ``agentgrpo.eval.stats``).
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence


def percentile_50(values: Sequence[float]) -> float:
    """Median (0.0 for no values): the seed's "reasoning depth" is p50 tokens per turn."""
    return float(statistics.median(values)) if values else 0.0
