"""``agentgrpo tau-bench``: τ-bench results files in and out.

* ``score RESULTS.json [--json] [--compare OTHER.json] [--regrade] [--data-dir DIR]``:
  pass^k by τ-bench's formula and the rest of our figures with 95% intervals
  (``agentgrpo.eval.tau_bench_score``), the paired difference with another file, and a
  regrade of every trajectory by our environment.
* ``export EVAL_DIR [--out FILE]``: an ``agentgrpo eval`` directory as τ-bench's results
  file (``agentgrpo eval --format tau-bench`` does this at the end of an evaluation).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tau-bench", help="score, compare and regrade τ-bench results files; export ours")
    sub = parser.add_subparsers(dest="tau_bench_command", metavar="COMMAND", required=True)
    score = sub.add_parser("score", help="pass^k (τ-bench's formula), pass@k, splits, floor, PRM-Lite, with 95%% CIs")
    score.add_argument("results", help="a τ-bench results file: [{task_id, reward, info, traj, trial}]")
    score.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    score.add_argument("--compare", metavar="OTHER", help="another results file of the same tasks and trials: "
                       "the paired difference (this − other) with 95%% intervals")
    score.add_argument("--regrade", action="store_true",
                       help="replay every trajectory's tool calls through our environment and report where our "
                            "grade differs from the recorded reward")
    score.add_argument("--data-dir", help="the τ-bench airline data directory the run used (splits, floor, write "
                                          "tasks, --regrade); our exports name their own tasks")
    score.set_defaults(func=run_score)
    export = sub.add_parser("export", help="write an `agentgrpo eval` directory as a τ-bench results file")
    export.add_argument("eval_dir", help="an `agentgrpo eval` out_dir (eval_config.yaml, transcripts.jsonl)")
    export.add_argument("--out", help="the file to write (default: EVAL_DIR/tau_bench_results.json)")
    export.set_defaults(func=run_export)


def run_score(args: argparse.Namespace) -> int:
    from agentgrpo.eval.tau_bench_score import compare_results, regrade_results, score_file, score_results

    results, tasks = score_file(args.results, args.data_dir)
    figures, rows = score_results(results, tasks)
    report: dict[str, Any] = {"file": str(args.results), **figures}
    if args.compare:
        other, other_tasks = score_file(args.compare, args.data_dir)
        other_figures, other_rows = score_results(other, other_tasks)
        report["compare"] = compare_results(rows, other_rows, (figures["trials"], other_figures["trials"]),
                                            names=(Path(args.results).name, Path(args.compare).name))
    if args.regrade:
        report["regrade"] = regrade_results(results, tasks)
    print(json.dumps(report, indent=2) if args.json else score_markdown(report))
    return 0


def run_export(args: argparse.Namespace) -> int:
    from agentgrpo.eval.tau_bench_io import export_eval_dir

    path, count = export_eval_dir(args.eval_dir, args.out)
    print(f"τ-bench results: {path} ({count} records)")
    return 0


def score_markdown(report: dict[str, Any]) -> str:
    """The report as a Markdown table (every figure with its 95% interval)."""
    lines = [f"# τ-bench results: `{report['file']}`", "",
             f"{report['records']} records, {report['tasks']} tasks × {report['trials']} trial(s); "
             f"{report['aborted']} aborted: {report['aborted_counted']}. "
             f"Average reward {report['average_reward']:.3f}.",
             "", "| figure | value | 95% CI |", "|---|---|---|"]

    def row(label: str, est: dict[str, Any] | None) -> None:
        if est and est.get("value") is not None:
            low, high = est.get("low"), est.get("high")
            interval = f"[{low:.3f}, {high:.3f}]" if low is not None and high is not None else "–"
            lines.append(f"| {label} | {est['value']:.3f} | {interval} |")

    for k in range(1, report["trials"] + 1):
        row(f"pass^{k}", report.get(f"pass^{k}"))
    for k in range(1, report["trials"] + 1):
        row(f"pass@{k} (finished)", report.get(f"pass@{k}"))
    for name, est in report["pass^k_finished"].items():
        row(f"{name}, aborted left out", est)
    for split, est in report["pass^1_by_split"].items():
        row(f"pass^1 {split}", est)
    for family, est in report["pass^1_by_family"].items():
        row(f"pass^1 family {family}", est)
    row(f"pass^1 on write tasks ({report['write_tasks']})", report.get("write_pass^1"))
    row("pass^1 on no-write tasks", report.get("no_write_pass^1"))
    row("family-balanced pass^1", report.get("family_pass^1"))
    weights = ", ".join(f"{k} {v:.2f}" for k, v in (report.get("tau_bench_weights") or {}).items())
    row(f"τ-bench-weighted pass^1 ({weights})", report.get("tau_bench_pass^1"))
    row("do-nothing floor", report.get("do_nothing_floor"))
    row("PRM-Lite process score (mean)", report.get("process_score"))
    row("PRM-Lite AUROC, success vs failure", report.get("prm_auroc"))
    if report.get("write_pass^1") is None:
        lines += ["", "Tasks unknown: pass --data-dir for the do-nothing floor, write tasks and splits."]
    if "compare" in report:
        c = report["compare"]
        lines += ["", f"Paired difference `{c['a']}` − `{c['b']}` ({c['tasks']} tasks × {c['trials']} trial(s)):", "",
                  "| pass^1 | difference | 95% CI |", "|---|---|---|"]
        for name, est in c["difference"].items():
            lines.append(f"| {name} | {est['value']:+.3f} | [{est['low']:+.3f}, {est['high']:+.3f}] |")
    if "regrade" in report:
        g = report["regrade"]
        lines += ["", f"Regrade by our environment: {g['agree']} agree, {g['disagree']} disagree, {g['skipped']} "
                  f"aborted skipped; differing tasks: {g['task_ids'] or 'none'}; tasks whose recorded gold differs "
                  f"from ours: {g['task_differs'] or 'none'}."]
    return "\n".join(lines) + "\n"
