"""``eval.md``: an evaluation report as a Markdown page, every pass figure with its 95% interval."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentgrpo.eval.metrics import SEED_SPLIT_WEIGHTS
from agentgrpo.eval.stats import RESAMPLES, Estimate
from agentgrpo.eval.types import EvalReport


def ci_of(metrics: Mapping[str, Any], *path: Any) -> Estimate | None:
    """The interval at ``metrics["ci"][path...]`` (JSON-read keys are strings), or None."""
    node: Any = metrics.get("ci")
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key, node.get(str(key)))
    return Estimate.from_dict(node) if isinstance(node, Mapping) and node.get("n") else None


def report_markdown(report: EvalReport) -> str:
    m = report.metrics
    left_out = f" ({m['aborted']} aborted episode(s) left out)" if m["aborted"] else ""
    lines = [
        f"# Evaluation: `{report.policy}`",
        "",
        f"{report.trials} trial(s) per task, temperature {report.temperature}, seed {report.seed}, "
        f"splits {report.split_sizes}, {report.wall_seconds:.0f} s. {m['episodes']} episodes finished, "
        f"{m['aborted']} aborted (a server request failed for good; left out of every metric).",
        "",
        _task_set_line(report),
        "",
        f"Intervals: 95% percentile bootstrap over tasks ({RESAMPLES} resamples, a task's trials together).",
        "",
        "| metric | value | 95% CI |",
        "|---|---|---|",
    ]
    for k, value in m["pass^k"].items():
        lines.append(_row(f"pass^{k}", value, ci_of(m, "pass^k", k), _over(m, k, left_out)))
    for k, value in m["pass@k"].items():
        lines.append(_row(f"pass@{k}", value, ci_of(m, "pass@k", k), _over(m, k, left_out)))
    for split, value in m["pass^1_by_split"].items():
        lines.append(_row(f"pass^1 {split}", value, ci_of(m, "pass^1_by_split", split)))
    if any(report.split_sizes.get(s) for s in SEED_SPLIT_WEIGHTS):  # none for a validation evaluation
        lines.append(_row("Generalization pass^1", m["generalization"], ci_of(m, "generalization")))
    if m.get("write_pass^1") is not None:
        lines.append(_row(f"pass^1 on write tasks ({m['write_tasks']} tasks)", m["write_pass^1"],
                          ci_of(m, "write_pass^1")))
        if m.get("no_write_pass^1") is not None:
            lines.append(_row("pass^1 on no-write tasks", m["no_write_pass^1"], ci_of(m, "no_write_pass^1")))
        lines.append(_row("do-nothing floor (pass^1 of an agent that ends at once)", m["do_nothing_floor"],
                          ci_of(m, "do_nothing_floor")))
    if m.get("family_pass^1") is not None:
        lines.append(_row("family-balanced pass^1 (every family alike)", m["family_pass^1"],
                          ci_of(m, "family_pass^1")))
    if m.get("tau_bench_pass^1") is not None:
        weights = ", ".join(f"{k} {v:.2f}" for k, v in (m.get("tau_bench_weights") or {}).items())
        lines.append(_row(f"τ-bench-weighted pass^1 ({weights})", m["tau_bench_pass^1"],
                          ci_of(m, "tau_bench_pass^1")))
    auroc = m.get("prm_auroc")
    if auroc:
        label = f"PRM-Lite AUROC, success vs failure ({auroc['successes']} / {auroc['failures']} episodes)"
        ci = None if auroc["value"] is None else Estimate.from_dict(auroc)
        lines.append(f"| {label} | {_num(auroc['value'])} | {_interval(ci)} |")
    lines += [
        f"| error rate | {m['error_rate']:.3f} | |",
        f"| reasoning depth (p50 tokens/turn) | {m['reasoning_depth_p50']:.0f} | |",
        f"| aborted episodes | {m['aborted']} | |",
        f"| cut-off episodes (turn or token budget ran out: score 0, as in τ-bench) | {m.get('cut_off', 0)} | |",
        "",
    ]
    tau_bench = m.get("tau_bench_pass^k") or {}
    if tau_bench:
        shown = ", ".join(f"pass^{k} {v:.3f}" for k, v in tau_bench.items())
        lines += [f"Aborted episodes: {m['aborted']}, left out of every figure above. τ-bench counts an episode "
                  f"that crashed as a failure; counted that way: {shown}.", ""]
    floors = m.get("do_nothing_floor_by_split") or {}
    if floors:
        lines += ["Do-nothing floor by split: " + ", ".join(f"{s} {v:.3f}" for s, v in floors.items()) + ".", ""]
    lines += ["| family | pass^1 |", "|---|---|"]
    lines += [f"| {family} | {value:.3f} |" for family, value in sorted(m["pass^1_by_family"].items())]
    return "\n".join(lines) + "\n"


def _task_set_line(report: EvalReport) -> str:
    t = report.task_set
    if t.get("source") != "heldout":
        return (f"Tasks: the env's own splits (env.seed {t.get('env_seed', '?')}, {t.get('env_source', '?')}): "
                "covered_seen and uncovered_seen are tasks trained on.")
    families = ", ".join(f"{s} {len(f)}" for s, f in t["families"].items())
    empty = [s for s, f in t["families"].items() if not f]
    note = (f" No family stands in {', '.join(empty)} (every family is in a training split of env.splits), "
            "so it has no task." if empty else "")
    size = (f"{t['tasks_per_family']} fresh tasks of every family" if t.get("tasks_per_family")
            else f"{t['tasks_per_split']} fresh tasks per split")
    return (f"Tasks: {size} from {len(t['worlds'])} held-out world(s) "
            f"(heldout_seed {t['heldout_seed']}); families per split: {families}.{note}")


def _row(label: str, value: float, ci: Estimate | None, note: str = "") -> str:
    return f"| {label} | {value:.3f}{note} | {_interval(ci)} |"


def _interval(ci: Estimate | None) -> str:
    return f"[{ci.low:.3f}, {ci.high:.3f}]" if ci else "–"


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _over(metrics: Mapping[str, Any], k: int, left_out: str) -> str:
    """What a pass^k cell is computed over, when that is not every task of the run."""
    tasks, all_tasks = metrics["pass^k_tasks"][k], metrics["tasks"]
    partial = f" over {tasks} of {all_tasks} tasks" if tasks != all_tasks else ""
    return f"{partial}{left_out}" if (partial or left_out) else ""
