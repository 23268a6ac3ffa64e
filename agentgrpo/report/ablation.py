"""Rendering of an ``agentgrpo ablate`` summary: the table, the bars and the progression plot.

Renders only: the numbers come from ``agentgrpo.jobs.ablate.summarize_setting``.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgrpo import metric_names as metric
from agentgrpo.eval.stats import Estimate
from agentgrpo.report.plots import plt, save_figure
from agentgrpo.tracking import read_metrics

COLUMNS = (
    ("pass^1", "overall pass^1"),
    ("generalization", "Generalization"),
    ("write_pass^1", "write-task pass^1"),
    ("error_rate", "error rate"),
    ("reasoning_depth_p50", "reasoning depth p50"),
)


def _mean(row: Mapping[str, Any], key: str, digits: int = 3) -> str:
    data = row.get("mean", {}).get(key)
    if data is None:
        return "–"
    est = Estimate.from_dict(data)
    if est.n <= 1:
        return f"{est.value:.{digits}f}"
    return f"{est.value:.{digits}f} ± {(est.high - est.low) / 2:.{digits}f}"


def _delta(row: Mapping[str, Any], key: str) -> str:
    data = row.get(key)
    if not data:
        return "–"
    est = Estimate.from_dict(data["pass^1"])
    mark = " *" if est.excludes_zero else ""
    if data.get("primary"):
        mark += " (primary)"
    elif data.get("p_holm") is not None:
        mark += f" (p_Holm {data['p_holm']:.3f})"
    return f"{est.format(signed=True)}{mark}"


def ablation_markdown(summary: Mapping[str, Any], has_progression: bool = False) -> str:
    """The seed study's table (mean ± 95% t half-width over seeds), paired deltas and findings."""
    rows = summary["rows"]
    seeds = summary["seeds"]
    extra = f" (GRPO overrides: `{' '.join(summary['overrides'])}`)" if summary["overrides"] else ""
    floor = next((r["mean"].get("do_nothing_floor") for r in rows.values() if r.get("mean", {}).get(
        "do_nothing_floor")), None)
    lines = [
        f"# Ablation: setting `{summary['setting']}`{extra}",
        "",
        f"Seeds {seeds}. Each cell: mean over the seeds ± the 95% t-interval's half-width. "
        "Δ columns: pass^1 difference, per task averaged over the seeds, 95% paired bootstrap over tasks "
        "(`*`: the interval excludes 0); Δ vs do-nothing is against the reward of ending every episode at "
        "once, task by task."
        + (f" The pre-registered primary comparison is {summary['primary']} vs SFT; every other Δ vs SFT is "
           "secondary, its bootstrap p-value Holm-adjusted over them (p_Holm ≤ 0.05: a difference that "
           "survives the multiplicity of the table)." if summary.get("primary") else "")
        + " collapsed: seeds whose run `agentgrpo diagnose` calls "
        "collapsed (entropy, format or length collapse, gradient explosion, or LLD past phase 1)."
        + (f" Do-nothing floor: {Estimate.from_dict(floor).value:.3f}." if floor else ""),
        "",
        "| variant | seeds | " + " | ".join(title for _, title in COLUMNS)
        + " | Δ vs do-nothing | Δ vs vanilla | Δ vs SFT | collapsed | diagnose |",
        "|---|---|" + "---|" * len(COLUMNS) + "---|---|---|---|---|",
    ]
    for name, row in rows.items():
        cells = [_mean(row, key, 0 if key == "reasoning_depth_p50" else 3) for key, _ in COLUMNS]
        findings = row.get("diagnose", {})
        flagged = sorted({f["check"] for per in findings.values() for f in per})
        diag = "–" if name == "SFT" else (", ".join(
            f"{c} ({sum(any(f['check'] == c for f in per) for per in findings.values())}/{len(findings)})"
            for c in flagged) or "none")
        collapsed = "–" if name == "SFT" or not findings else (
            f"{sum(any(f.get('collapse') for f in per) for per in findings.values())}/{len(findings)}")
        deltas = " | ".join(_delta(row, key) for key in ("vs_floor", "vs_vanilla", "vs_sft"))
        lines.append(f"| {name} | {len(row.get('seeds_done', []))} | " + " | ".join(cells)
                     + f" | {deltas} | {collapsed} | {diag} |")
    lines += ["", "![comparison](comparison.png)"]
    if has_progression:
        lines += ["", "![validation pass^1 by step](progression.png)"]
    details = [(name, seed, f) for name, row in rows.items() for seed, per in row.get("diagnose", {}).items()
               for f in per]
    if details:
        lines += ["", "## diagnose findings", ""]
        lines += [f"- {name} seed {seed}, step {f['step']}: **{f['check']}**"
                  + (" (collapse)" if f.get("collapse") else "") + f": {f['summary']}"
                  for name, seed, f in details]
    return "\n".join(lines) + "\n"


def plot_bars(summary: Mapping[str, Any], out_png: str | Path, key: str = "pass^1") -> Path:
    """Bars of ``key`` (mean over seeds) per variant, error bars = the 95% t-interval."""
    names, values, errors = [], [], []
    for name, row in summary["rows"].items():
        data = row.get("mean", {}).get(key)
        if data is None:
            continue
        est = Estimate.from_dict(data)
        names.append(name)
        values.append(est.value)
        errors.append([[est.value - est.low], [est.high - est.value]])
    fig, ax = plt.subplots(figsize=(1.1 * max(len(names), 3) + 2, 3.6))
    if names:
        lower = [e[0][0] for e in errors]
        upper = [e[1][0] for e in errors]
        colors = ["#999999" if n == "SFT" else "#3a6ea5" for n in names]
        ax.bar(names, values, yerr=[lower, upper], capsize=4, color=colors)
    ax.set_ylabel(f"{key} (mean over seeds, 95% CI)")
    ax.set_title(f"setting {summary['setting']}")
    ax.grid(axis="y", alpha=0.3)
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    fig.tight_layout()
    return save_figure(fig, out_png)


def plot_progression(runs: Mapping[str, Sequence[Path]], out_png: str | Path, key: str = metric.VAL_PASS1) -> bool:
    """``key`` against step per variant (mean over its seeds' runs); False (no file) if no run logged it."""
    curves = {}
    for name, paths in runs.items():
        by_step: dict[int, list[float]] = {}
        for path in paths:
            if Path(path).is_file():
                for record in read_metrics(path):
                    if record.get(key) is not None:
                        by_step.setdefault(int(record["step"]), []).append(float(record[key]))
        if by_step:
            steps = sorted(by_step)
            curves[name] = (steps, [sum(by_step[s]) / len(by_step[s]) for s in steps])
    if not curves:
        return False
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for name, (steps, values) in curves.items():
        ax.plot(steps, values, marker="o", markersize=3, label=name)
    ax.set_xlabel("step")
    ax.set_ylabel(f"{key} (mean over seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, out_png)
    return True
