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


def comparison_table(metrics_by_name: Mapping[str, Mapping[str, Any]], baseline: str | None = None) -> str:
    """Markdown table: one row per metric, one column per checkpoint (+ Δ vs ``baseline``)."""
    names = list(metrics_by_name)
    header = "| Metric | " + " | ".join(names) + (f" | Δ vs {baseline} |" if baseline else " |")
    lines = [header, "|---" * (len(names) + 1 + (1 if baseline else 0)) + "|"]
    for label, getter in ROWS:
        values = [getter(metrics_by_name[n]) for n in names]
        cells = [_fmt(label, v) for v in values]
        row = f"| {label} | " + " | ".join(cells) + " |"
        if baseline:
            base = getter(metrics_by_name[baseline])
            last = values[-1]
            row += f" {_delta(base, last)} |"
        lines.append(row)
    return "\n".join(lines) + "\n"


def _fmt(label: str, value: Any) -> str:
    if value is None:
        return "–"
    return f"{value:.0f}" if "tokens" in label else f"{value:.3f}"


def _delta(base: Any, value: Any) -> str:
    if base is None or value is None:
        return "–"
    if base == 0:
        return f"{value - base:+.3f}"
    return f"{(value - base) / abs(base):+.0%}"
