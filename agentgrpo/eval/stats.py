"""Uncertainty of evaluation figures: bootstrap CIs over tasks, paired differences, CIs
over seeds, intervals with seeds *and* tasks as random (``hierarchical_bootstrap``), sign-flip
p-values, the minimum detectable effect of a grid, and the AUROC of a score against success.
Pure numpy: no torch, no I/O.

The unit of resampling is the task (its trials stay together), because tasks, not
trials, are what a benchmark samples; where several training seeds were evaluated on the
same tasks, seeds are sampled too. Resampling uses numpy's PCG64 generator with a fixed
seed, so the same inputs give the same interval on every machine.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

RESAMPLES = 2000
"""Bootstrap resamples: the 2.5/97.5 percentiles move by < 0.005 on pass^1 of 100+ tasks."""

SIGN_FLIPS = 20_000
"""Random sign patterns of a sign-flip test: the smallest p it can give is 1/20001, and a p near
0.05 is known to ±0.003 (binomial standard error), well inside any Holm threshold it meets."""

Z_975 = 1.959964
Z_80 = 0.841621
"""Standard-normal quantiles of a two-sided 5% test and of 80% power (minimum detectable effect)."""

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


def hierarchical_bootstrap(values: Sequence[Sequence[float]], weights: Sequence[float] | None = None,
                           strata: Sequence[int | str] | None = None, *, resamples: int = RESAMPLES,
                           level: float = LEVEL, seed: int = 0) -> Estimate:
    """Weighted mean over tasks of ``values[s][t]`` (S seeds × T tasks, e.g. a checkpoint's
    pass^1 minus its baseline's), with seeds and tasks both random.

    value = Σ_t w_t · mean_s values[s][t] / Σ_t w_t. Each resample draws S seeds with
    replacement, then T tasks with replacement (within each stratum when ``strata`` is given,
    so a family-balanced test set keeps its design; strata of one task are pooled); every drawn seed takes the same task
    draw, because every seed played the same tasks (seeds and tasks are crossed, not nested).
    The interval is the percentile interval of the resampled means: it widens with the spread
    between seeds, which an interval over tasks of the seed-averaged values leaves out.
    ``n`` is the number of tasks. With few seeds (3) the seed draw is coarse (10 distinct
    multisets) and the interval is on the narrow side of the truth: read it with the
    per-seed values beside it.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 2 or v.size == 0:
        return Estimate(0.0, 0.0, 0.0, 0)
    n_seeds, n_tasks = v.shape
    w = np.ones(n_tasks) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (n_tasks,) or w.sum() <= 0:
        raise ValueError(f"weights must be {n_tasks} non-negative numbers with a positive sum")
    value = float((w * v.mean(axis=0)).sum() / w.sum())
    rng = np.random.default_rng(seed)
    seed_counts = np.zeros((resamples, n_seeds))
    np.add.at(seed_counts, (np.arange(resamples)[:, None], rng.integers(0, n_seeds, (resamples, n_seeds))), 1.0)
    seed_means = seed_counts @ v / n_seeds  # (R, T): each resample's seed-averaged value of every task
    tasks = _task_draws(rng, n_tasks, strata, resamples)  # (R, T) task indices
    drawn = np.take_along_axis(seed_means, tasks, axis=1)
    draws = (drawn * w[tasks]).sum(axis=1) / np.maximum(w[tasks].sum(axis=1), 1e-300)
    return _interval(value, draws, n_tasks, level)


def _task_draws(rng: np.random.Generator, n_tasks: int, strata: Sequence[int | str] | None,
                resamples: int) -> np.ndarray:
    """(resamples, n_tasks) task indices drawn with replacement, within each stratum if given."""
    if strata is None:
        return rng.integers(0, n_tasks, size=(resamples, n_tasks))
    labels = np.asarray([str(s) for s in strata])
    if labels.shape != (n_tasks,):
        raise ValueError(f"strata must label each of the {n_tasks} tasks")
    # a stratum of one task cannot show its spread: such tasks are resampled together
    names, counts = np.unique(labels, return_counts=True)
    labels = np.where(np.isin(labels, names[counts < 2]), "\0single", labels)
    out = np.empty((resamples, n_tasks), dtype=np.int64)
    for label in sorted(set(labels.tolist())):
        members = np.flatnonzero(labels == label)
        out[:, members] = members[rng.integers(0, members.size, size=(resamples, members.size))]
    return out


def sign_flip_p_value(values: Sequence[float], weights: Sequence[float] | None = None, *,
                      draws: int = SIGN_FLIPS, seed: int = 0) -> float:
    """Two-sided p-value of "the per-task differences ``values`` are symmetric about 0" (a paired
    sign-flip permutation test): the weighted mean is compared with its value under ``draws``
    random sign patterns, p = (1 + #{|flipped| ≥ |observed|}) / (draws + 1). Exact under the
    null whatever the values' distribution (ties and the {-1, 0, 1} differences of one trial)."""
    d = np.asarray(values, dtype=np.float64)
    if d.size == 0:
        return 1.0
    w = np.ones(d.size) if weights is None else np.asarray(weights, dtype=np.float64)
    observed = abs(float((w * d).sum()))
    rng = np.random.default_rng(seed)
    extreme = 0
    for block in np.array_split(np.arange(draws), max(1, draws // 2000)):  # bounded memory
        signs = rng.integers(0, 2, size=(block.size, d.size)) * 2 - 1
        extreme += int((np.abs(signs @ (w * d)) >= observed - 1e-12).sum())
    return (1 + extreme) / (draws + 1)


def gatekeep_holm(p_values: Mapping[str, float], primary: str | None, alpha: float = 0.05) -> dict[str, float]:
    """Adjusted p-values of a table's starred comparisons, family-wise error ≤ ``alpha``:
    the pre-registered ``primary`` is tested alone at ``alpha``; only if it is rejected are the
    others tested, Holm-adjusted among themselves (a serial gatekeeper). When the gate stays
    shut every other comparison gets p 1. Without a primary, Holm over all of them."""
    if primary is None or primary not in p_values:
        return holm_adjust(p_values)
    others = {name: p for name, p in p_values.items() if name != primary}
    gate = p_values[primary]
    adjusted = {name: max(p, gate) for name, p in holm_adjust(others).items()} if gate <= alpha else \
        dict.fromkeys(others, 1.0)
    return {primary: gate, **adjusted}


def variance_components(values: Sequence[Sequence[float]]) -> dict[str, float]:
    """Seed, task and residual variances of an S × T table (seeds and tasks crossed, one value per
    cell), from the two-way random-effects ANOVA's mean squares (negative estimates set to 0)."""
    v = np.asarray(values, dtype=np.float64)
    n_seeds, n_tasks = v.shape
    grand = v.mean()
    seed_means, task_means = v.mean(axis=1), v.mean(axis=0)
    residual = v - seed_means[:, None] - task_means[None, :] + grand
    ms_res = float((residual ** 2).sum() / max((n_seeds - 1) * (n_tasks - 1), 1))
    ms_seed = float(n_tasks * ((seed_means - grand) ** 2).sum() / max(n_seeds - 1, 1))
    ms_task = float(n_seeds * ((task_means - grand) ** 2).sum() / max(n_tasks - 1, 1))
    return {"seed": max(0.0, (ms_seed - ms_res) / n_tasks) if n_seeds > 1 else 0.0,
            "task": max(0.0, (ms_task - ms_res) / n_seeds) if n_seeds > 1 else ms_task,
            "residual": ms_res if n_seeds > 1 else 0.0}


def minimum_detectable_effect(components: Mapping[str, float], seeds: int, tasks: int) -> float:
    """The smallest true mean difference a two-sided 5% test detects with 80% power in a grid of
    ``seeds`` × ``tasks`` (crossed), given ``variance_components``: (z_.975 + z_.80) × SE with
    SE² = σ²_seed/S + σ²_task/T + σ²_res/(S·T)."""
    se2 = components["seed"] / seeds + components["task"] / tasks + components["residual"] / (seeds * tasks)
    return (Z_975 + Z_80) * math.sqrt(se2)


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
