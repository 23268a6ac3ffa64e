"""The statistics of a variants × seeds grid (``agentgrpo ablate``): seed-aware paired
differences of the headline figures, their p-values, and one multiplicity correction per table.

Every checkpoint of a grid is evaluated on the same tasks, trials and user seeds, so a
comparison of ``a`` with ``b`` is a table ``d[s, t]`` = a's pass^1 on task t for seed s minus
b's (for a baseline trained per seed, its own seed's; for one shared checkpoint, that one; for
the do-nothing floor, the task's empty-episode reward). From it:

* each headline figure's difference (``agentgrpo.eval.figures``: overall, family-balanced,
  τ-bench-weighted, write, no-write) with a 95% interval that treats seeds and tasks as random
  (``hierarchical_bootstrap``, tasks resampled within families), and the per-seed differences;
* a two-sided sign-flip p-value of the starred figure (``STARRED``) over the tasks' seed-averaged
  differences;
* the variance components of that figure and the grid's minimum detectable effect (80% power).

``star_table`` adjusts the p-values of every starred comparison of a table at once: the
pre-registered primary is a gatekeeper, the rest are Holm-adjusted behind it. A comparison
carries a star when its adjusted p ≤ 0.05 and its seed-aware interval excludes 0.
Pure numpy through ``agentgrpo.eval.stats``: no torch, no I/O.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from agentgrpo.eval.compare import paired_rows
from agentgrpo.eval.figures import FIGURES, figure_weights
from agentgrpo.eval.stats import (
    Estimate,
    gatekeep_holm,
    hierarchical_bootstrap,
    minimum_detectable_effect,
    sign_flip_p_value,
    variance_components,
)
from agentgrpo.eval.summary import task_pass1

STARRED = "family"
"""The figure whose difference carries a star (family-balanced pass^1: every family alike)."""
ALPHA = 0.05

Evaluation = Mapping[str, Any]
"""An evaluation's eval.json content (``per_task`` rows with ``successes``, ``family``, ``write``,
``do_nothing``)."""


def paired_table(a: Mapping[int, Evaluation], b: Mapping[int, Evaluation] | None,
                 pair: Mapping[int, int] | None = None) -> tuple[list[int], list[Mapping[str, Any]], np.ndarray]:
    """``(seeds, task rows, d)``: d[s, t] = a's pass^1 on task t for seed s minus b's for seed
    ``pair[s]`` (default: the same seed), or minus the task's do-nothing reward when ``b`` is None.
    Seeds are those of ``a`` whose partner exists; tasks in a's first seed's order."""
    pair = pair or {seed: seed for seed in a}
    seeds = sorted(s for s in a if b is None or pair.get(s) in b)
    if not seeds:
        return [], [], np.zeros((0, 0))
    rows: list[Mapping[str, Any]] = list(a[seeds[0]]["per_task"])
    ids = [r["task_id"] for r in rows]
    table = np.zeros((len(seeds), len(ids)))
    for i, seed in enumerate(seeds):
        if b is None:
            by_id = {r["task_id"]: r for r in a[seed]["per_task"]}
            if set(by_id) != set(ids):
                raise ValueError(f"seed {seed} evaluated other tasks than seed {seeds[0]}")
            table[i] = [task_pass1(by_id[t]) - float(by_id[t]["do_nothing"]) for t in ids]
        else:
            rows_a, rows_b = paired_rows(a[seed], b[pair[seed]], (f"seed{seed}", f"baseline of seed{seed}"))
            table[i] = [task_pass1(rows_a[t]) - task_pass1(rows_b[t]) for t in ids]
    return seeds, rows, table


def seed_aware_delta(a: Mapping[int, Evaluation], b: Mapping[int, Evaluation] | None,
                     pair: Mapping[int, int] | None = None) -> dict[str, Any] | None:
    """Every headline figure's difference a − b (``paired_table``) with seeds and tasks random; the
    starred figure's sign-flip p-value, variance components and minimum detectable effect at the
    grid's size. None when no seed pairs up, or (floor) the evaluations lack task facts."""
    if b is None and any(r.get("do_nothing") is None for e in a.values() for r in e["per_task"]):
        return None
    seeds, rows, table = paired_table(a, b, pair)
    if not seeds:
        return None
    families = [r["family"] for r in rows]
    figures: dict[str, Any] = {}
    for figure in FIGURES:
        weights = figure_weights(rows, figure)
        if weights is None:
            continue
        w = np.asarray(weights)
        estimate = hierarchical_bootstrap(table, w, families)
        per_seed = {seed: float((w * table[i]).sum() / w.sum()) for i, seed in enumerate(seeds)}
        figures[figure] = {"estimate": estimate.to_dict(), "per_seed": per_seed}
    weights = np.asarray(figure_weights(rows, STARRED))
    components = variance_components(table)
    return {
        "seeds": seeds, "pairs": {seed: (pair or {}).get(seed, seed) for seed in seeds} if b is not None else None,
        "figures": figures,
        "p": sign_flip_p_value(table.mean(axis=0), weights),
        "variance": components,
        "mde": minimum_detectable_effect(components, len(seeds), len(rows)),
        "tasks": len(rows),
    }


def star_table(comparisons: Mapping[str, dict[str, Any]], primary: str | None, alpha: float = ALPHA) -> None:
    """Adjust the p-values of every comparison of a table together (``gatekeep_holm``: ``primary``
    first, Holm over the rest behind it) and mark the stars, in place: ``p_adjusted`` and
    ``star`` (adjusted p ≤ alpha and the seed-aware interval of ``STARRED`` excludes 0)."""
    raw = {name: c["p"] for name, c in comparisons.items() if c is not None}
    for name, p_adjusted in gatekeep_holm(raw, primary, alpha).items():
        comparison = comparisons[name]
        estimate = Estimate.from_dict(comparison["figures"][STARRED]["estimate"])
        comparison["p_adjusted"] = p_adjusted
        comparison["star"] = p_adjusted <= alpha and estimate.excludes_zero
        comparison["primary"] = name == primary
