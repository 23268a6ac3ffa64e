"""Rendering of an ``agentgrpo ablate`` summary: the table, the bars and the progression plot.

Renders only: the numbers come from ``agentgrpo.jobs.ablate_summary.summarize_setting``.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgrpo import metric_names as metric
from agentgrpo.eval.figures import FIGURE_LABELS
from agentgrpo.eval.stats import Estimate
from agentgrpo.report.plots import plt, save_figure
from agentgrpo.tracking import read_metrics

COLUMNS = (
    ("pass^1", "overall pass^1"),
    ("family_pass^1", "family-balanced"),
    ("tau_bench_pass^1", "τ-bench-weighted"),
    ("write_pass^1", "write-task pass^1"),
    ("no_write_pass^1", "no-write pass^1"),
    ("generalization", "Generalization"),
    ("error_rate", "error rate"),
    ("reasoning_depth_p50", "reasoning depth p50"),
    ("cut_off", "cut-off episodes"),
)
COMPARISON_TITLES = {"vs_floor": "do-nothing floor", "vs_vanilla": "vanilla", "vs_sft": "SFT"}
"""The title of a row's comparison (others, such as H4's ``vs_turn_discount``, by the variant's name)."""
DELTA_FIGURES = ("overall", "family", "tau_bench", "write", "no_write")


def _mean(row: Mapping[str, Any], key: str, digits: int = 3) -> str:
    data = row.get("mean", {}).get(key)
    if data is None:
        return "–"
    est = Estimate.from_dict(data)
    if est.n <= 1:
        return f"{est.value:.{digits}f}"
    return f"{est.value:.{digits}f} ± {(est.high - est.low) / 2:.{digits}f}"


def _figure(comparison: Mapping[str, Any], figure: str) -> str:
    data = comparison["figures"].get(figure)
    return Estimate.from_dict(data["estimate"]).format(signed=True) if data else "–"


def _verdict(comparison: Mapping[str, Any]) -> str:
    mark = "*" if comparison.get("star") else ""
    role = "primary" if comparison.get("primary") else "adjusted"
    return f"{comparison['p']:.4f} ({role} {comparison.get('p_adjusted', comparison['p']):.4f}) {mark}".rstrip()


def delta_table(summary: Mapping[str, Any]) -> list[str]:
    """One line per comparison: every figure's difference, the starred figure's per-seed values,
    its sign-flip p (raw and adjusted over the table), the minimum detectable effect."""
    starred = summary.get("starred", "family")
    lines = ["| variant | − | " + " | ".join(FIGURE_LABELS[f] for f in DELTA_FIGURES)
             + f" | per seed ({FIGURE_LABELS[starred]}) | p (adjusted) | MDE |",
             "|---|---|" + "---|" * len(DELTA_FIGURES) + "---|---|---|"]
    for name, row in summary["rows"].items():
        for key, comparison in row.items():
            if not key.startswith("vs_") or not comparison:
                continue
            title = COMPARISON_TITLES.get(key, key.removeprefix("vs_"))
            per_seed = comparison["figures"][starred]["per_seed"]
            seeds = ", ".join(f"{float(v):+.3f}" for v in per_seed.values())
            lines.append(f"| {name} | {title} | " + " | ".join(_figure(comparison, f) for f in DELTA_FIGURES)
                         + f" | {seeds} | {_verdict(comparison)} | {comparison['mde']:.3f} |")
    return lines


def ablation_markdown(summary: Mapping[str, Any], has_progression: bool = False) -> str:
    """The seed study's table (mean ± 95% t half-width over seeds), seed-aware deltas and findings."""
    rows = summary["rows"]
    seeds = summary["seeds"]
    extra = f" (GRPO overrides: `{' '.join(summary['overrides'])}`)" if summary["overrides"] else ""
    split = summary.get("split", "test")
    floor = next((r["mean"].get("do_nothing_floor") for r in rows.values() if r.get("mean", {}).get(
        "do_nothing_floor")), None)
    lines = [
        f"# Ablation: setting `{summary['setting']}`{extra}, {split} set",
        "",
        f"Seeds {seeds}. Each cell: mean over the seeds ± the 95% t-interval's half-width. Cut-off episodes "
        "(the turn or token budget ran out) score 0, as in τ-bench. collapsed: seeds whose run `agentgrpo "
        "diagnose` calls collapsed (entropy, format or length collapse, gradient explosion, or LLD past phase 1)."
        + (f" Do-nothing floor: {Estimate.from_dict(floor).value:.3f}." if floor else ""),
        "",
        "| variant | seeds | " + " | ".join(title for _, title in COLUMNS) + " | collapsed | diagnose |",
        "|---|---|" + "---|" * len(COLUMNS) + "---|---|",
    ]
    for name, row in rows.items():
        cells = [_mean(row, key, 0 if key in ("reasoning_depth_p50", "cut_off") else 3) for key, _ in COLUMNS]
        findings = row.get("diagnose", {})
        flagged = sorted({f["check"] for per in findings.values() for f in per})
        diag = "–" if name == "SFT" else (", ".join(
            f"{c} ({sum(any(f['check'] == c for f in per) for per in findings.values())}/{len(findings)})"
            for c in flagged) or "none")
        collapsed = "–" if name == "SFT" or not findings else (
            f"{sum(any(f.get('collapse') for f in per) for per in findings.values())}/{len(findings)}")
        lines.append(f"| {name} | {len(row.get('seeds_done', []))} | " + " | ".join(cells)
                     + f" | {collapsed} | {diag} |")
    starred = FIGURE_LABELS[summary.get("starred", "family")]
    lines += [
        "", "## Differences", "",
        "Each Δ: the variant's pass^1 minus the other's, task by task and seed by seed (a run minus the SFT "
        "checkpoint it started from; the do-nothing floor is the reward of an episode the agent ends at "
        "once), with a 95% interval that resamples seeds and then tasks within families (seeds and tasks both "
        f"random). p: two-sided sign-flip test over the tasks of {starred} (20,000 draws), adjusted over "
        "every row of this table"
        + (f": the pre-registered primary ({summary['primary']} − SFT) is tested first at 0.05 and the "
           "others, Holm-adjusted, only if it holds" if summary.get("primary") else ": Holm")
        + f". `*`: adjusted p ≤ 0.05 and the {starred} interval excludes 0. MDE: the smallest true "
        f"{starred} difference this many seeds and tasks detect with 80% power (from the measured seed and "
        "task variances); a smaller difference is not a finding.",
        "", *delta_table(summary),
    ]
    found = summary.get("hypotheses") or {}
    if found:
        lines += ["", "## The seed study's hypotheses", "",
                  "H1–H3: the two variants paired seed by seed, mean difference with a 95% t-interval over seeds; "
                  "H4, H5: rows of the table above (seed-aware interval, adjusted p).", "",
                  "| | hypothesis | Δ [95% CI] | per seed | verdict |", "|---|---|---|---|---|"]
        for key, h in found.items():
            per_seed = ", ".join(f"{float(v):+.3f}" for v in h["per_seed"].values())
            estimate = Estimate.from_dict(h["estimate"])
            lines.append(f"| {key} | {h['statement']} | {estimate.format(signed=True)} | {per_seed} | "
                         f"{h['verdict']} |")
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
