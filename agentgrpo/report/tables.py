"""Comparison tables of evaluated checkpoints, in the seed study's layout.

Each cell is a figure with its 95% bootstrap interval over tasks when the evaluation
carries one (``metrics["ci"]``, see ``agentgrpo.eval.summary``). Every table shows the
do-nothing floor (what an agent that ends at once scores on these tasks) and pass^1 on
the tasks that need a database write, so a pass^1 near the floor reads as what it is.
Differences against a baseline are paired differences with their interval when a
``Comparison`` (``agentgrpo.eval.compare``) is given, else the seed's relative change.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentgrpo.eval.compare import Comparison
from agentgrpo.eval.markdown import ci_of
from agentgrpo.eval.stats import Estimate


@dataclass(frozen=True)
class Row:
    label: str
    value: Callable[[Mapping[str, Any]], Any]
    ci: tuple[Any, ...] | None = None
    """Path of the row's interval under ``metrics["ci"]``."""
    paired: str | None = None
    """Name of the row's difference in ``Comparison.estimates()``."""
    fmt: str = ".3f"
    delta: bool = True
    """False where a change means nothing (the floor is the tasks', not the policy's)."""


def _pass1(m: Mapping[str, Any]) -> Any:
    return m["pass^k"][1] if 1 in m["pass^k"] else m["pass^k"]["1"]


def _auroc(m: Mapping[str, Any]) -> Any:
    return (m.get("prm_auroc") or {}).get("value")


def _split(name: str) -> Row:
    return Row(f"{name} pass^1", lambda m: m["pass^1_by_split"].get(name), ("pass^1_by_split", name), f"split/{name}")


ROWS = (
    Row("Overall pass^1", _pass1, ("pass^k", 1), "overall"),
    Row("Family-balanced pass^1", lambda m: m.get("family_pass^1"), ("family_pass^1",), "family"),
    Row("τ-bench-weighted pass^1", lambda m: m.get("tau_bench_pass^1"), ("tau_bench_pass^1",), "tau_bench"),
    Row("Write-task pass^1", lambda m: m.get("write_pass^1"), ("write_pass^1",), "write"),
    Row("No-write pass^1", lambda m: m.get("no_write_pass^1"), ("no_write_pass^1",), "no_write"),
    Row("Do-nothing floor", lambda m: m.get("do_nothing_floor"), delta=False),
    Row("Cut-off episodes (score 0)", lambda m: m.get("cut_off"), fmt=".0f", delta=False),
    Row("pass^1, families trained on", lambda m: m["pass^1_by_split"].get("seen_families"),
        ("pass^1_by_split", "seen_families"), "split/seen_families"),
    _split("covered_seen"),
    _split("uncovered_seen"),
    _split("unseen"),
    Row("Generalization", lambda m: m["generalization"], ("generalization",), "generalization"),
    Row("Error Rate", lambda m: m["error_rate"]),
    Row("Reasoning Depth (p50 tokens)", lambda m: m["reasoning_depth_p50"], fmt=".0f"),
    Row("PRM-Lite AUROC", _auroc, delta=False),
)

ABORTED_ROW = Row("Aborted episodes (left out)", lambda m: m.get("aborted", 0), fmt=".0f")
"""Shown when an evaluation lost episodes to a failing server (its metrics exclude them)."""


def comparison_table(metrics_by_name: Mapping[str, Mapping[str, Any]], baseline: str | None = None,
                     paired: Mapping[str, Comparison] | None = None) -> str:
    """Markdown table: one row per metric, one column per checkpoint.

    With a ``baseline`` and two columns, a last column gives the other's change against it
    (the seed's "Δ vs Vanilla"); with more columns each cell carries its change in brackets.
    ``paired`` (column name → ``compare_evals(column, baseline)``) makes that change the
    paired difference with its 95% interval on the pass^1 rows; the other rows (and
    columns without one) keep the relative change.
    """
    names = list(metrics_by_name)
    paired = paired or {}
    delta_column = baseline is not None and len(names) == 2
    heading = f"Δ vs {baseline}" + (" (paired, 95% CI)" if paired else "")
    header = "| Metric | " + " | ".join(names) + (f" | {heading} |" if delta_column else " |")
    lines = [header, "|---" * (len(names) + 1 + delta_column) + "|"]
    aborted = any(m.get("aborted") for m in metrics_by_name.values())  # a server failed some episodes for good
    for row in ROWS + ((ABORTED_ROW,) if aborted else ()):
        if row.label == "PRM-Lite AUROC" and not any(_auroc(m) is not None for m in metrics_by_name.values()):
            continue
        values = {n: row.value(metrics_by_name[n]) for n in names}
        base = values.get(baseline) if baseline else None
        cells = []
        for name in names:
            cell = _cell(row, values[name], metrics_by_name[name])
            if baseline and not delta_column and name != baseline and values[name] is not None:
                cell += f" ({_change(row, base, values[name], paired.get(name))})"
            cells.append(cell)
        line = f"| {row.label} | " + " | ".join(cells) + " |"
        if delta_column:
            other = next(n for n in names if n != baseline)
            line += f" {_change(row, base, values[other], paired.get(other))} |"
        lines.append(line)
    return "\n".join(lines) + "\n"


def _cell(row: Row, value: Any, metrics: Mapping[str, Any]) -> str:
    if value is None:
        return "–"
    ci = ci_of(metrics, *row.ci) if row.ci else None
    text = f"{value:{row.fmt}}"
    return f"{text} [{ci.low:{row.fmt}}, {ci.high:{row.fmt}}]" if ci else text


def _change(row: Row, base: Any, value: Any, comparison: Comparison | None) -> str:
    if not row.delta:
        return "–"
    estimate: Estimate | None = comparison.estimates().get(row.paired) if comparison and row.paired else None
    if estimate is not None:
        return estimate.format(signed=True)
    if base is None or value is None:
        return "–"
    if base == 0:
        return f"{value - base:+.3f}"
    return f"{(value - base) / abs(base):+.0%}"
