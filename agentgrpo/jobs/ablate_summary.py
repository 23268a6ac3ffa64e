"""The numbers of an ``agentgrpo ablate`` setting: each variant's figures per seed and their mean,
its seed-aware paired differences (``agentgrpo.eval.grid``) against the do-nothing floor, vanilla
and the SFT checkpoint its runs started from (and the seed study's H4/H5 pairs), one
multiplicity correction over the table, the five hypotheses' verdicts
(``agentgrpo.jobs.ablate_hypotheses``), and each run's ``agentgrpo diagnose`` findings;
``write_report`` renders them
(``agentgrpo.report.ablation``).
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentgrpo.config import DataError
from agentgrpo.eval.grid import STARRED, seed_aware_delta, star_table
from agentgrpo.jobs.ablate_hypotheses import hypotheses, table_comparisons

if TYPE_CHECKING:
    from agentgrpo.jobs.ablate import AblationPlan

BASELINE = "vanilla"


def summarize_setting(plan: AblationPlan, setting: str) -> dict[str, Any]:
    """Per experiment: metrics per seed, their mean ± t-interval, paired deltas, diagnose findings."""
    from agentgrpo.diagnose import diagnose

    seeds = plan.seeds_of(setting)
    sft_evals = {seed: _maybe_eval(plan.sft_eval_dir(seed)) for seed in seeds}
    # the SFT row counts checkpoints: one shared by every seed (shared_sft, --sft) is one row entry
    first_of_dir = {plan.sft_eval_dir(seed): seed for seed in reversed(seeds)}
    rows: dict[str, Any] = {"SFT": _row({s: sft_evals[s] for s in first_of_dir.values() if sft_evals[s]})}
    evals: dict[str, dict[int, dict[str, Any]]] = {}
    for experiment in plan.experiments_of(setting):
        per_seed = {seed: _maybe_eval(plan.run_dir(setting, seed, experiment) / plan.eval_name) for seed in seeds}
        evals[experiment] = {s: e for s, e in per_seed.items() if e}
        row = _row(evals[experiment])
        findings = {}
        for seed in seeds:
            run_dir = plan.run_dir(setting, seed, experiment)
            if (run_dir / "metrics.jsonl").is_file():
                try:
                    result = diagnose(run_dir)
                except DataError:  # started, no step logged yet: nothing to diagnose
                    continue
                findings[seed] = [{"check": f.check, "step": f.step, "summary": f.summary, "collapse": f.is_collapse}
                                  for f in result.findings]
        row["diagnose"] = findings
        rows[experiment] = row
    sft_by_seed = {s: sft_evals[s] for s in first_of_dir.values() if sft_evals[s]}
    # each seed's runs pair with the SFT checkpoint they started from (one shared one, or their own)
    sft_of = {seed: first_of_dir[plan.sft_eval_dir(seed)] for seed in seeds}
    comparisons: dict[str, Any] = {"SFT/vs_floor": seed_aware_delta(sft_by_seed, None)}
    for experiment, by_seed in evals.items():
        comparisons[f"{experiment}/vs_floor"] = seed_aware_delta(by_seed, None)
        comparisons[f"{experiment}/vs_sft"] = seed_aware_delta(by_seed, sft_by_seed, sft_of)
        if BASELINE in evals and experiment != BASELINE:
            comparisons[f"{experiment}/vs_vanilla"] = seed_aware_delta(by_seed, evals[BASELINE])
    comparisons.update(table_comparisons(evals))  # the hypotheses' H4 and H5
    comparisons = {name: c for name, c in comparisons.items() if c is not None}
    primary = f"{plan.primary}/vs_sft" if plan.primary else None
    star_table(comparisons, primary if primary in comparisons else None)
    for name, comparison in comparisons.items():
        variant, against = name.split("/")
        rows[variant][against] = comparison
    found = hypotheses(evals, lambda experiment, seed: plan.run_dir(setting, seed, experiment), comparisons)
    return {"setting": setting, "seeds": seeds, "overrides": plan.settings[setting], "rows": rows,
            "primary": plan.primary, "split": plan.split, "starred": STARRED, "hypotheses": found}


def _maybe_eval(out_dir: Path) -> dict[str, Any] | None:
    path = out_dir / "eval.json"
    return json.loads(path.read_text()) if path.is_file() else None


HEADLINE = {
    "pass^1": lambda m: m["pass^k"]["1"] if "1" in m["pass^k"] else m["pass^k"][1],
    "family_pass^1": lambda m: m.get("family_pass^1"),
    "tau_bench_pass^1": lambda m: m.get("tau_bench_pass^1"),
    "write_pass^1": lambda m: m.get("write_pass^1"),
    "no_write_pass^1": lambda m: m.get("no_write_pass^1"),
    "generalization": lambda m: m["generalization"],
    "cut_off": lambda m: m.get("cut_off"),
    "error_rate": lambda m: m["error_rate"],
    "reasoning_depth_p50": lambda m: m["reasoning_depth_p50"],
    "do_nothing_floor": lambda m: m.get("do_nothing_floor"),
}
"""The table's columns, read from an eval.json's ``metrics``."""


def _row(by_seed: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    from agentgrpo.eval.stats import mean_over_seeds

    values = {name: {seed: get(e["metrics"]) for seed, e in by_seed.items()} for name, get in HEADLINE.items()}
    return {
        "seeds_done": sorted(by_seed),
        "per_seed": values,
        "mean": {name: mean_over_seeds([v for v in per.values() if v is not None]).to_dict()
                 for name, per in values.items() if any(v is not None for v in per.values())},
    }


def write_report(plan: AblationPlan, setting: str) -> dict[str, Any]:
    from agentgrpo.report.ablation import ablation_markdown, plot_bars, plot_progression

    summary = summarize_setting(plan, setting)
    out = plan.report_dir(setting)
    out.mkdir(parents=True, exist_ok=True)
    plot_bars(summary, out / "comparison.png")
    runs = {e: [plan.run_dir(setting, s, e) / "metrics.jsonl" for s in plan.seeds_of(setting)]
            for e in plan.experiments_of(setting)}
    has_val = plot_progression(runs, out / "progression.png")
    (out / "ablation.md").write_text(ablation_markdown(summary, has_progression=has_val))
    (out / "ablation.json").write_text(json.dumps(summary, indent=2))
    return summary
