"""Comparison tables of evaluated checkpoints, in the seed study's layout."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ROWS = (
    ("Overall pass^1", lambda m: m["pass^k"][1] if 1 in m["pass^k"] else m["pass^k"]["1"]),
    ("Train pass^1", lambda m: m["pass^1_by_split"].get("train")),
    ("covered_seen pass^1", lambda m: m["pass^1_by_split"].get("covered_seen")),
    ("uncovered_seen pass^1", lambda m: m["pass^1_by_split"].get("uncovered_seen")),
    ("unseen pass^1", lambda m: m["pass^1_by_split"].get("unseen")),
    ("Generalization", lambda m: m["generalization"]),
    ("Error Rate", lambda m: m["error_rate"]),
    ("Reasoning Depth (p50 tokens)", lambda m: m["reasoning_depth_p50"]),
)


ABORTED_ROW = (("Aborted episodes (left out)", lambda m: m.get("aborted", 0)),)
"""Shown when an evaluation lost episodes to a failing server (its metrics exclude them)."""


def comparison_table(metrics_by_name: Mapping[str, Mapping[str, Any]], baseline: str | None = None) -> str:
    """Markdown table: one row per metric, one column per checkpoint.

    With a ``baseline`` and two columns, a last column gives the other's change against it
    (the seed's "Δ vs Vanilla"); with more columns each cell carries its change in brackets.
    """
    names = list(metrics_by_name)
    delta_column = baseline is not None and len(names) == 2
    header = "| Metric | " + " | ".join(names) + (f" | Δ vs {baseline} |" if delta_column else " |")
    lines = [header, "|---" * (len(names) + 1 + delta_column) + "|"]
    aborted = any(m.get("aborted") for m in metrics_by_name.values())  # a server failed some episodes for good
    for label, getter in ROWS + (ABORTED_ROW if aborted else ()):
        values = {n: getter(metrics_by_name[n]) for n in names}
        base = values.get(baseline) if baseline else None
        cells = []
        for name in names:
            cell = _fmt(label, values[name])
            if baseline and not delta_column and name != baseline and values[name] is not None:
                cell += f" ({_delta(base, values[name])})"
            cells.append(cell)
        row = f"| {label} | " + " | ".join(cells) + " |"
        if delta_column:
            other = next(n for n in names if n != baseline)
            row += f" {_delta(base, values[other])} |"
        lines.append(row)
    return "\n".join(lines) + "\n"


def _fmt(label: str, value: Any) -> str:
    if value is None:
        return "–"
    return f"{value:.0f}" if "tokens" in label or "episodes" in label else f"{value:.3f}"


def _delta(base: Any, value: Any) -> str:
    if base is None or value is None:
        return "–"
    if base == 0:
        return f"{value - base:+.3f}"
    return f"{(value - base) / abs(base):+.0%}"
