"""Uncertainty of evaluation figures: bootstrap CIs over tasks, paired differences, CIs
over seeds, and the AUROC of a score against success. Pure numpy: no torch, no I/O.

The unit of resampling is the task (its trials stay together), because tasks, not
trials, are what a benchmark samples. Resampling uses numpy's PCG64 generator with a
fixed seed, so the same inputs give the same interval on every machine.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

RESAMPLES = 2000
"""Bootstrap resamples: the 2.5/97.5 percentiles move by < 0.005 on pass^1 of 100+ tasks."""

LEVEL = 0.95

_T_975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
          2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086]
"""Student-t 0.975 quantiles for 1..20 degrees of freedom (no scipy dependency)."""


@dataclass(frozen=True)
class Estimate:
    """A figure with its 95% interval over ``n`` units (tasks, or seeds)."""

    value: float
    low: float
    high: float
    n: int

    @property
    def excludes_zero(self) -> bool:
        """The interval lies strictly above or strictly below 0."""
        return self.low > 0 or self.high < 0

    def format(self, digits: int = 3, signed: bool = False) -> str:
        sign = "+" if signed else ""
        return f"{self.value:{sign}.{digits}f} [{self.low:{sign}.{digits}f}, {self.high:{sign}.{digits}f}]"

    def to_dict(self) -> dict[str, float]:
        return {"value": self.value, "low": self.low, "high": self.high, "n": self.n}

    @classmethod
    def from_dict(cls, data: Mapping[str, float]) -> Estimate:
        return cls(float(data["value"]), float(data["low"]), float(data["high"]), int(data["n"]))


def _interval(value: float, draws: np.ndarray, n: int, level: float) -> Estimate:
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail]) if draws.size else (value, value)
    return Estimate(float(value), float(low), float(high), n)


def bootstrap_mean(values: Sequence[float], *, resamples: int = RESAMPLES, level: float = LEVEL,
                   seed: int = 0) -> Estimate:
    """Mean of per-task ``values`` with a percentile-bootstrap interval (tasks resampled)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return Estimate(0.0, 0.0, 0.0, 0)
    rng = np.random.default_rng(seed)
    draws = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    return _interval(float(x.mean()), draws, int(x.size), level)


def bootstrap_stratified(strata: Mapping[str, Sequence[float]], combine: Callable[[Mapping[str, float]], float],
                         *, resamples: int = RESAMPLES, level: float = LEVEL, seed: int = 0) -> Estimate:
    """``combine`` of per-stratum means (e.g. Generalization of two splits' pass^1), tasks
    resampled within each stratum so every resample keeps the strata's sizes."""
    arrays = {name: np.asarray(v, dtype=np.float64) for name, v in strata.items() if len(v)}
    if not arrays:
        return Estimate(0.0, 0.0, 0.0, 0)
    rng = np.random.default_rng(seed)
    means = {name: x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1) for name, x in arrays.items()}
    draws = np.array([combine({name: float(m[i]) for name, m in means.items()}) for i in range(resamples)])
    value = combine({name: float(x.mean()) for name, x in arrays.items()})
    return _interval(value, draws, sum(x.size for x in arrays.values()), level)


def paired_difference(a: Mapping[str, float], b: Mapping[str, float], *, resamples: int = RESAMPLES,
                      level: float = LEVEL, seed: int = 0) -> Estimate:
    """Mean of ``a[task] − b[task]`` over the tasks both evaluated, with a bootstrap interval.

    Pairing (same tasks, trials and user seeds) removes the task-difficulty variance two
    independent intervals would carry. Raises if the two share no task.
    """
    common = sorted(set(a) & set(b))
    if not common:
        raise ValueError("paired_difference: the two evaluations share no task")
    return bootstrap_mean([a[k] - b[k] for k in common], resamples=resamples, level=level, seed=seed)


def bootstrap_p_value(values: Sequence[float], *, resamples: int = RESAMPLES, seed: int = 0) -> float:
    """Two-sided p-value of "the mean of per-task ``values`` is 0" from the same task bootstrap
    as ``bootstrap_mean`` (same seed, same draws): twice the smaller share of resampled means on
    either side of 0, counted with the observed one ((k + 1) / (B + 1)), capped at 1."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return 1.0
    rng = np.random.default_rng(seed)
    draws = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    below = (int((draws <= 0).sum()) + 1) / (resamples + 1)
    above = (int((draws >= 0).sum()) + 1) / (resamples + 1)
    return min(1.0, 2 * min(below, above))


def holm_adjust(p_values: Mapping[str, float]) -> dict[str, float]:
    """Holm–Bonferroni adjusted p-values of a family of comparisons (name -> raw p): the k-th
    smallest of m is multiplied by m − k + 1, made non-decreasing in that order, capped at 1.
    Rejecting where the adjusted p ≤ α controls the family-wise error rate at α."""
    ordered = sorted(p_values.items(), key=lambda item: item[1])
    adjusted: dict[str, float] = {}
    running = 0.0
    for rank, (name, p) in enumerate(ordered):
        running = max(running, min(1.0, (len(ordered) - rank) * p))
        adjusted[name] = running
    return adjusted


def t_quantile_975(df: int) -> float:
    """Two-sided 95% Student-t quantile (normal beyond 20 degrees of freedom)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    return _T_975[df - 1] if df <= len(_T_975) else 1.96


def mean_over_seeds(values: Sequence[float]) -> Estimate:
    """Mean ± t-interval over independent seeds (a single seed gets a zero-width interval)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return Estimate(0.0, 0.0, 0.0, 0)
    mean = float(x.mean())
    if x.size == 1:
        return Estimate(mean, mean, mean, 1)
    half = t_quantile_975(x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return Estimate(mean, mean - half, mean + half, int(x.size))


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """Area under the ROC curve of ``scores`` separating ``labels`` True from False: the
    chance a random success scores above a random failure (ties count ½). NaN when one
    class is empty."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    pos, neg = s[y], s[~y]
    if pos.size == 0 or neg.size == 0:
        return math.nan
    greater = (pos[:, None] > neg[None, :]).sum()
    ties = (pos[:, None] == neg[None, :]).sum()
    return float((greater + 0.5 * ties) / (pos.size * neg.size))


def bootstrap_auroc(scores: Sequence[Sequence[float]], labels: Sequence[Sequence[bool]], *,
                    resamples: int = RESAMPLES, level: float = LEVEL, seed: int = 0) -> Estimate:
    """``auroc`` of episodes grouped by task, with a bootstrap interval that resamples tasks
    (a task's episodes stay together, as in ``bootstrap_mean``). ``scores[i]`` and
    ``labels[i]`` are task i's episodes. The value is NaN when one class is empty; resamples
    that lose a class are left out of the percentiles. ``n`` counts episodes.

    Each resample weights an episode by how often its task was drawn, and the weighted
    Mann–Whitney count is taken over the scores sorted once (ties count ½), so a resample
    costs O(episodes) rather than O(successes × failures).
    """
    task = np.repeat(np.arange(len(scores)), [len(s) for s in scores])
    s = np.concatenate([np.asarray(x, dtype=np.float64) for x in scores]) if len(scores) else np.zeros(0)
    y = np.concatenate([np.asarray(x, dtype=bool) for x in labels]) if len(labels) else np.zeros(0, bool)
    value = auroc(s, y)
    if math.isnan(value):
        return Estimate(value, math.nan, math.nan, int(s.size))
    order = np.argsort(s, kind="stable")
    task, y = task[order], y[order]
    _, starts = np.unique(s[order], return_index=True)  # first episode of each distinct score
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(scores), size=(resamples, len(scores)))
    auc = np.concatenate([_weighted_auroc(block, task, y, starts, len(scores))
                          for block in np.array_split(draws, max(1, resamples // 250))])  # bounded memory
    return _interval(value, auc[~np.isnan(auc)], int(s.size), level)


def _weighted_auroc(draws: np.ndarray, task: np.ndarray, y: np.ndarray, starts: np.ndarray,
                    n_tasks: int) -> np.ndarray:
    """AUROC of each resample (row of ``draws``: task indices) over episodes sorted by score;
    ``starts``: first episode of each distinct score. NaN where a class is missing."""
    counts = np.zeros((draws.shape[0], n_tasks))
    np.add.at(counts, (np.arange(draws.shape[0])[:, None], draws), 1.0)
    weight = counts[:, task]  # (R, episodes): how often each episode is in the resample
    pos = np.add.reduceat(weight * y, starts, axis=1)  # (R, distinct scores)
    neg = np.add.reduceat(weight * ~y, starts, axis=1)
    below = np.cumsum(neg, axis=1) - neg  # failures scored strictly lower
    pairs = pos.sum(axis=1) * neg.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(pairs > 0, (pos * (below + 0.5 * neg)).sum(axis=1) / pairs, np.nan)
