"""The headline pass^1 figures of an evaluation as weighted means over its tasks.

An evaluation's overall pass^1 weighs every task alike, so a family with more tasks weighs
more; a test set drawn with ``tasks_per_family`` makes the two the same. Beside it:

* ``family``: every family of the set weighs alike (the mean of the families' pass^1);
* ``tau_bench``: the families re-weighted to τ-bench airline's mix of what solves a task —
  a database write (30 of its 50 test tasks), nothing at all (19: no write, no output
  required), a reply with the right output (1) — each kind's families alike within it;
* ``write`` and ``no_write``: the tasks whose gold actions change the database, and the others.

A figure is ``Σ_t w_t · pass^1_t / Σ_t w_t`` with the weights of ``figure_weights``, so the
same weights serve a point estimate, a paired difference and a bootstrap that resamples
tasks within families (``agentgrpo.eval.stats.hierarchical_bootstrap``). Pure Python.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Literal

TaskKind = Literal["write", "no_change", "output"]

TAU_BENCH_AIRLINE_KINDS: dict[str, int] = {"write": 30, "no_change": 19, "output": 1}
"""τ-bench airline's 50 test tasks by kind (read from its tasks with our grader: 30 need a write,
19 are solved by doing nothing, 1 needs only a reply with the right output); its do-nothing
floor is 19/50 = 0.38."""

FIGURES = ("overall", "family", "tau_bench", "write", "no_write")
"""The headline pass^1 figures, in table order."""

FIGURE_LABELS = {"overall": "overall pass^1", "family": "family-balanced pass^1",
                 "tau_bench": "τ-bench-weighted pass^1", "write": "write-task pass^1",
                 "no_write": "no-write pass^1"}


def task_kind(write: bool, do_nothing: float) -> TaskKind:
    """What solves a task: a write (its gold actions change the database), nothing (an empty
    episode scores 1), or a reply with the right output (the rest)."""
    if write:
        return "write"
    return "no_change" if do_nothing == 1.0 else "output"


def tau_bench_weights(kinds_present: Sequence[str]) -> dict[str, float]:
    """τ-bench airline's shares of the kinds a test set holds, renormalised over them (a set
    without an output family spreads that 2% over the other two)."""
    present = {k: n for k, n in TAU_BENCH_AIRLINE_KINDS.items() if k in set(kinds_present)}
    total = sum(present.values())
    return {k: n / total for k, n in present.items()} if total else {}


def figure_weights(rows: Sequence[Mapping[str, Any]], figure: str) -> list[float] | None:
    """Each row's (task's) weight in ``figure``; None when the figure cannot be computed (no
    task facts for write / no_write / tau_bench, or no task of the kind it needs).

    rows: per-task rows with ``family``, and ``write`` / ``do_nothing`` (None when unknown).
    """
    if figure == "overall":
        return [1.0] * len(rows)
    per_family = Counter(r["family"] for r in rows)
    if figure == "family":
        return [1.0 / per_family[r["family"]] for r in rows]
    if any(r.get("write") is None for r in rows):
        return None
    if figure in ("write", "no_write"):
        weights = [1.0 if bool(r["write"]) == (figure == "write") else 0.0 for r in rows]
        return weights if any(weights) else None
    if figure == "tau_bench":
        kinds = [task_kind(r["write"], r["do_nothing"]) for r in rows]
        shares = tau_bench_weights(kinds)
        cells = Counter((r["family"], k) for r, k in zip(rows, kinds))  # a family's tasks of one kind
        families_of = Counter(k for _, k in cells)
        return [shares[k] / families_of[k] / cells[(r["family"], k)] for r, k in zip(rows, kinds)]
    raise ValueError(f"unknown figure {figure!r}; choose from {FIGURES}")


def weighted_mean(values: Sequence[float], weights: Sequence[float]) -> float:
    total = sum(weights)
    return sum(w * v for w, v in zip(weights, values)) / total if total else 0.0
