"""The seed study's five hypotheses, each read off an ablation setting with its interval.

* H1, Turn-Discount prevents reasoning collapse: evaluation tokens per turn (p50),
  Turn-Discount − vanilla, expected > 0;
* H2, Joint breaks group saturation: the share of training groups whose total rewards all
  agree (mean over steps), Joint − vanilla, expected < 0;
* H3, Joint improves unseen-family generalization: Generalization pass^1 (families without
  demonstrations), Joint − vanilla, expected > 0;
* H4, LATA beats Turn-Discount: family-balanced pass^1, LATA − Turn-Discount, expected > 0;
* H5, Joint beats the best single component: family-balanced pass^1, Joint − the better of
  LATA and PRM-Lite, expected > 0.

H1–H3 pair the two variants seed by seed and give the mean difference a t-interval over
seeds; H4 and H5 are comparisons of the ablation table (``agentgrpo.eval.grid``), so their
p-values are adjusted with the table's. A verdict is ``supported`` when the interval lies on
the expected side of 0 (and, for H4/H5, the comparison is starred), ``contradicted`` when it
lies on the other side, and ``not shown`` otherwise. A hypothesis whose variants the grid
did not run is left out.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agentgrpo import metric_names as metric
from agentgrpo.eval.grid import STARRED, seed_aware_delta
from agentgrpo.eval.stats import Estimate, mean_over_seeds
from agentgrpo.tracking import read_metrics

Evaluations = Mapping[str, Mapping[int, Mapping[str, Any]]]
"""Experiment → seed → eval.json content."""

STATEMENTS = {
    "H1": "Turn-Discount prevents reasoning collapse (evaluation tokens per turn, Turn-Discount − vanilla)",
    "H2": "Joint breaks group saturation (share of training groups whose total rewards all agree, Joint − vanilla)",
    "H3": "Joint improves unseen-family generalization (Generalization pass^1, Joint − vanilla)",
    "H4": "LATA beats Turn-Discount (family-balanced pass^1, LATA − Turn-Discount)",
    "H5": "Joint beats the best single component (family-balanced pass^1, Joint − the better of LATA "
          "and PRM-Lite)",
}
COMPONENTS = ("lata", "prm_lite")


def table_comparisons(evals: Evaluations) -> dict[str, dict[str, Any]]:
    """H4's and H5's comparisons, to be starred with the rest of the table (name: ``a/vs_b``)."""
    out: dict[str, dict[str, Any] | None] = {}
    if {"lata", "turn_discount"} <= set(evals):
        out["lata/vs_turn_discount"] = seed_aware_delta(evals["lata"], evals["turn_discount"])
    best = best_component(evals)
    if best and "joint" in evals:
        out[f"joint/vs_{best}"] = seed_aware_delta(evals["joint"], evals[best])
    return {name: c for name, c in out.items() if c is not None}


def best_component(evals: Evaluations) -> str | None:
    """The single component of Joint with the higher mean family-balanced pass^1."""
    def score(name: str) -> float:
        values = [e["metrics"].get("family_pass^1") or 0.0 for e in evals[name].values()]
        return sum(values) / len(values)

    present = [c for c in COMPONENTS if evals.get(c)]
    return max(present, key=score) if present else None


def hypotheses(evals: Evaluations, run_dirs: Callable[[str, int], Path],
               comparisons: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each hypothesis the grid can speak to: its statement, the figure, the interval, the
    per-seed differences and the verdict. ``run_dirs(experiment, seed)`` is a GRPO run's
    directory (its metrics.jsonl gives H2); ``comparisons`` the starred table's."""
    out: dict[str, dict[str, Any]] = {}
    metrics_of = {"H1": ("turn_discount", "vanilla", _eval_metric("reasoning_depth_p50"), +1),
                  "H2": ("joint", "vanilla", _saturation(run_dirs), -1),
                  "H3": ("joint", "vanilla", _eval_metric("generalization"), +1)}
    for name, (a, b, read, sign) in metrics_of.items():
        if a not in evals or b not in evals:
            continue
        diffs = {}
        for seed in sorted(set(evals[a]) & set(evals[b])):
            va, vb = read(a, seed, evals[a][seed]), read(b, seed, evals[b][seed])
            if va is not None and vb is not None:
                diffs[seed] = va - vb
        if diffs:
            estimate = mean_over_seeds(list(diffs.values()))
            out[name] = {"statement": STATEMENTS[name], "estimate": estimate.to_dict(), "per_seed": diffs,
                         "verdict": _verdict(estimate, sign)}
    best = best_component(evals)
    for name, key in (("H4", "lata/vs_turn_discount"), ("H5", f"joint/vs_{best}" if best else None)):
        comparison = comparisons.get(key) if key else None
        if comparison:
            estimate = Estimate.from_dict(comparison["figures"][STARRED]["estimate"])
            verdict = _verdict(estimate, +1)
            if verdict == "supported" and not comparison.get("star"):
                verdict = "not shown (not significant after the table's adjustment)"
            out[name] = {"statement": STATEMENTS[name], "estimate": estimate.to_dict(),
                         "per_seed": comparison["figures"][STARRED]["per_seed"], "verdict": verdict,
                         "comparison": key, "p_adjusted": comparison.get("p_adjusted")}
    return out


def _verdict(estimate: Estimate, sign: int) -> str:
    if (estimate.low > 0 and sign > 0) or (estimate.high < 0 and sign < 0):
        return "supported"
    if (estimate.high < 0 and sign > 0) or (estimate.low > 0 and sign < 0):
        return "contradicted"
    return "not shown (the interval holds 0)"


def _eval_metric(key: str) -> Callable[[str, int, Mapping[str, Any]], float | None]:
    return lambda experiment, seed, evaluation: evaluation["metrics"].get(key)


def _saturation(run_dirs: Callable[[str, int], Path]) -> Callable[[str, int, Mapping[str, Any]], float | None]:
    """A run's mean share over steps of groups whose total rewards all agree (zero advantage)."""
    def read(experiment: str, seed: int, evaluation: Mapping[str, Any]) -> float | None:
        path = run_dirs(experiment, seed) / "metrics.jsonl"
        if not path.is_file():
            return None
        values = [float(r[metric.ALGO_SATURATED_GROUP_FRAC]) for r in read_metrics(path)
                  if r.get(metric.ALGO_SATURATED_GROUP_FRAC) is not None]
        return sum(values) / len(values) if values else None
    return read
