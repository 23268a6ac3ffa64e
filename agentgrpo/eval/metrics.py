"""The seed study's evaluation metrics: pass^k, pass@k, split pass^1 and generalization
(reasoning depth, p50 tokens per turn, is ``agentgrpo.stats_util.percentile_50``).
Pure Python: no torch, no I/O."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from math import comb

SEED_SPLIT_WEIGHTS = {"uncovered_seen": 24, "unseen": 10}
"""The seed's Generalization pass^1 = (24·uncovered_seen + 10·unseen) / 34 (its split sizes)."""


def pass_hat_k(successes: Sequence[Sequence[bool]], k: int) -> float:
    """pass^k (τ-bench): mean over tasks of C(c, k) / C(n, k).

    successes: one inner list of trial outcomes per task (n trials, c successes).
    The chance that k trials drawn without replacement from a task's n all succeed;
    k = 1 is the plain success rate. Every task needs n ≥ k trials.
    """
    return _mean_over_tasks(successes, k, "pass^", lambda n, c: comb(c, k) / comb(n, k))


def pass_at_k(successes: Sequence[Sequence[bool]], k: int) -> float:
    """pass@k: mean over tasks of 1 − C(n−c, k) / C(n, k) (at least one of k succeeds)."""
    return _mean_over_tasks(successes, k, "pass@", lambda n, c: 1.0 - comb(n - c, k) / comb(n, k))


def task_pass_hat_k(trials: Sequence[bool], k: int) -> float:
    """One task's pass^k, C(c, k) / C(n, k): what ``pass_hat_k`` averages (and a bootstrap resamples)."""
    return _per_task([trials], k, "pass^", lambda n, c: comb(c, k) / comb(n, k))[0]


def task_pass_at_k(trials: Sequence[bool], k: int) -> float:
    """One task's pass@k, 1 − C(n−c, k) / C(n, k)."""
    return _per_task([trials], k, "pass@", lambda n, c: 1.0 - comb(n - c, k) / comb(n, k))[0]


def _mean_over_tasks(successes: Sequence[Sequence[bool]], k: int, name: str, per_task) -> float:
    """Mean of ``per_task(n, c)`` over tasks (n trials, c successes), checking k ≤ n."""
    values = _per_task(successes, k, name, per_task)
    return sum(values) / len(values) if values else 0.0


def _per_task(successes: Sequence[Sequence[bool]], k: int, name: str, per_task) -> list[float]:
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    values = []
    for trials in successes:
        n, c = len(trials), sum(bool(t) for t in trials)
        if n < k:
            raise ValueError(f"{name}{k} needs at least {k} trials per task, a task has {n}")
        values.append(per_task(n, c))
    return values


def generalization(split_pass1: Mapping[str, float], split_sizes: Mapping[str, int] | None = None) -> float:
    """Split-size-weighted mean of uncovered_seen and unseen pass^1.

    With the seed's sizes (24, 10) this is its (24·u + 10·v)/34; pass the actual split
    sizes to weight by them. Splits that are missing or empty are left out.
    """
    weights = dict(split_sizes) if split_sizes is not None else dict(SEED_SPLIT_WEIGHTS)
    pairs = [(weights.get(s, 0), split_pass1[s]) for s in SEED_SPLIT_WEIGHTS if s in split_pass1]
    total = sum(w for w, _ in pairs)
    return sum(w * v for w, v in pairs) / total if total else 0.0
