"""Scoring τ-bench results files with our metrics and intervals, pairing two, regrading one.

``score_results`` turns a results file (``agentgrpo.eval.tau_bench_io``) into the figures
of an ``agentgrpo eval`` report, each with its 95% bootstrap interval over tasks
(``agentgrpo.eval.stats``):

* ``pass^k`` (k = 1..n) exactly as τ-bench computes it (``run.py``'s ``display_metrics``):
  n is the number of distinct ``trial`` values in the file, c a task's records with a reward
  within 1e-6 of 1, and pass^k the mean over tasks of C(c, k) / C(n, k) — a crashed
  (aborted) episode is a failure; ``pass^k_finished`` leaves aborted episodes out, as our
  evaluator does, beside it;
* pass@k, pass^1 per split and per family where the records or the task source say them,
  the do-nothing floor, write-task, no-write and τ-bench-weighted pass^1 where the tasks are
  known (a τ-bench data directory, or the settings our exports carry), PRM-Lite's mean process score and its AUROC
  for success vs failure (scored from ``traj`` when the file has no score).

``compare_results`` is the paired difference of two files on the same tasks
(``agentgrpo.eval.compare``); ``regrade_results`` replays every trajectory through our
environment and lists where our grade differs from the recorded reward.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from math import comb
from pathlib import Path
from typing import Any

from agentgrpo.config import DataError
from agentgrpo.eval.compare import compare_evals
from agentgrpo.eval.stats import bootstrap_mean
from agentgrpo.eval.summary import summarize, task_pass1
from agentgrpo.eval.tasks import EvalTask, task_facts
from agentgrpo.eval.tau_bench_io import TauBenchResult, eval_config_from, replay
from agentgrpo.eval.types import EpisodeRecord
from agentgrpo.rewards.messages import parse_messages
from agentgrpo.rewards.prm_lite import PRMLite

UNKNOWN_SPLIT = "all"
"""Split of a task whose split nobody says (a τ-bench file scored without its data directory)."""


# ---- the tasks a file was run on ----------------------------------------------------------------
def task_source(results: list[TauBenchResult], data_dir: str | None = None) -> dict[str, EvalTask] | None:
    """Our tasks by id, with split and world: from the settings our exports carry (their
    ``env.data_dir`` replaced by ``data_dir`` when given), else from a τ-bench data directory
    (the seed's splits of its 50 tasks), else None (floor, write tasks and regrading unknown)."""
    from agentgrpo.eval.tasks import eval_tasks

    settings = next((r.ours["eval"] for r in results if isinstance(r.ours.get("eval"), Mapping)), None)
    if settings is not None:
        settings = {k: v for k, v in settings.items() if k != "task_ids"}  # every task of the run's splits
        if data_dir and settings.get("env", {}).get("source") == "tau_bench":
            settings["env"] = {**settings["env"], "data_dir": data_dir}
    elif data_dir:  # τ-bench's 50 tasks in the seed's three splits
        settings = {"env": {"source": "tau_bench", "data_dir": data_dir, "user": {"kind": "llm"}}}
    else:
        return None
    return {t.task.task_id: t for t in eval_tasks(eval_config_from(settings))}


# ---- scoring ------------------------------------------------------------------------------------
def tau_bench_pass_hat_k(results: list[TauBenchResult]) -> dict[int, float]:
    """τ-bench's pass^k for k = 1..n, its formula on its terms (see the module docstring)."""
    per_task = _tau_bench_per_task(results)
    return {k: sum(v) / len(v) for k, v in per_task.items()}


def _tau_bench_per_task(results: list[TauBenchResult]) -> dict[int, list[float]]:
    """Each task's C(c, k) / C(n, k), k = 1..n, with τ-bench's global n (distinct trials)."""
    n = len({r.trial for r in results})
    successes: Counter[str] = Counter()
    for r in results:
        successes[r.key] += r.success
    return {k: [comb(c, k) / comb(n, k) for c in successes.values()] for k in range(1, n + 1)}


def episode_records(results: list[TauBenchResult], tasks: Mapping[str, EvalTask] | None) -> list[EpisodeRecord]:
    """The file's records as our evaluator's, for ``summarize`` (PRM-Lite scores the traj
    when the record carries no score; tokens per turn are estimated at 4 characters a token)."""
    prm = PRMLite()
    records = []
    for r in results:
        ours, known = r.ours, tasks.get(r.key) if tasks else None
        steps = parse_messages(r.traj, foreign=True).steps
        process = ours.get("process_score")
        if process is None and steps and not r.aborted:
            process = prm.score_messages(r.traj, foreign=True).process_score
        records.append(EpisodeRecord(
            task_id=r.key, split=ours.get("split") or (known.split if known else UNKNOWN_SPLIT),
            family=ours.get("family") or (known.task.family if known else "unknown"), trial=r.trial,
            reward=1.0 if r.success else r.reward, has_error=any(s.error for s in steps),
            turn_tokens=[max(1, round(len(s.text) / 4)) for s in steps if s.text], termination=ours.get(
                "termination", "unknown"), messages=[], aborted=r.aborted,
            error=r.info.get("error") if r.aborted else None, user_seed=ours.get("user_seed"),
            process_score=process))
    return records


def score_results(results: list[TauBenchResult], tasks: Mapping[str, EvalTask] | None = None
                  ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Every figure of the file (the ``--json`` object of ``agentgrpo tau-bench score``), and
    the per-task rows (aborted episodes as failures) that ``compare_results`` pairs."""
    if tasks is not None:
        unknown = sorted({r.key for r in results} - set(tasks))
        if unknown:
            raise DataError(f"task(s) {unknown[:5]} of the results file are not among the {len(tasks)} tasks of its "
                            "task source; pass the --data-dir the run used")
    records = episode_records(results, tasks)
    trials = len({r.trial for r in results})
    finished_metrics, per_task = _summary(records, trials, tasks)
    counted_metrics, counted_rows = _summary([_as_failure(r) for r in records], trials, tasks)
    tau_per_task = _tau_bench_per_task(results)
    out: dict[str, Any] = {"records": len(results), "tasks": len(tau_per_task[1]), "trials": trials,
                           "aborted": finished_metrics["aborted"],
                           "aborted_counted": "pass^k counts an aborted (crashed) episode as a failure, as "
                                              "τ-bench does; pass^k_finished leaves it out, as agentgrpo eval does",
                           "average_reward": sum(r.reward for r in results) / len(results)}
    for k, values in tau_per_task.items():
        out[f"pass^{k}"] = bootstrap_mean(values).to_dict()
    for k, est in finished_metrics["ci"]["pass@k"].items():
        out[f"pass@{k}"] = est
    out["pass^k_finished"] = {f"pass^{k}": est for k, est in finished_metrics["ci"]["pass^k"].items()}
    out["pass^1_by_split"] = {s: _estimate([r for r in counted_rows if r["split"] == s])
                              for s in sorted({r["split"] for r in counted_rows})}
    out["pass^1_by_family"] = {f: _estimate([r for r in counted_rows if r["family"] == f])
                               for f in sorted({r["family"] for r in counted_rows})}
    ci = counted_metrics["ci"]
    out["write_pass^1"] = ci.get("write_pass^1")
    out["write_tasks"] = counted_metrics["write_tasks"] if tasks else None
    out["no_write_pass^1"] = ci.get("no_write_pass^1") if tasks else None
    out["family_pass^1"] = ci.get("family_pass^1")
    out["tau_bench_pass^1"] = ci.get("tau_bench_pass^1") if tasks else None
    out["tau_bench_weights"] = counted_metrics["tau_bench_weights"] if tasks else None
    out["do_nothing_floor"] = ci.get("do_nothing_floor")
    out["cut_off"] = counted_metrics["cut_off"]
    scores = [[s for s in r["process_scores"] if s is not None] for r in per_task]
    means = [sum(s) / len(s) for s in scores if s]
    out["process_score"] = bootstrap_mean(means).to_dict() if means else None
    out["prm_auroc"] = finished_metrics["prm_auroc"]
    return out, counted_rows


def _summary(records: list[EpisodeRecord], trials: int, tasks: Mapping[str, EvalTask] | None):
    split_of = {r.task_id: r.split for r in records}
    facts = {i: task_facts(tasks[i].bundle, tasks[i].task) for i in split_of} if tasks else None
    return summarize(records, trials, dict(Counter(split_of.values())), facts)


def _as_failure(record: EpisodeRecord) -> EpisodeRecord:
    """τ-bench's view of an aborted episode: a finished failure."""
    return replace(record, aborted=False, reward=0.0) if record.aborted else record


def _estimate(rows: list[Mapping[str, Any]]) -> dict[str, float]:
    return bootstrap_mean([task_pass1(r) for r in rows]).to_dict()


# ---- pairing two files --------------------------------------------------------------------------
def compare_results(a: list[dict[str, Any]], b: list[dict[str, Any]], trials: tuple[int, int],
                    names: tuple[str, str]) -> dict[str, Any]:
    """Paired difference ``a − b`` of two files' per-task rows (``score_results``; aborted
    episodes as failures): the same tasks and trials are required; user seeds are checked
    where both files record them."""
    def as_eval(rows: list[dict[str, Any]], n: int) -> dict[str, Any]:
        return {"trials": n, "seed": None, "per_task": rows, "split_sizes": dict(Counter(r["split"] for r in rows))}

    ea, eb = as_eval(a, trials[0]), as_eval(b, trials[1])
    seeds_known = all(None not in r["user_seeds"] for r in ea["per_task"] + eb["per_task"])
    diff = compare_evals(ea, eb, names=names, require_user_seeds=seeds_known)
    return diff.to_dict() | {"user_seeds_checked": seeds_known}


# ---- regrading ----------------------------------------------------------------------------------
def regrade_results(results: list[TauBenchResult], tasks: Mapping[str, EvalTask] | None) -> dict[str, Any]:
    """Replay every finished trajectory through our environment and compare our grade with
    the recorded reward: counts ``agree`` / ``disagree``, the differing ``task_ids`` and each
    disagreement (with why our grader says so); aborted records are ``skipped``; ``task_differs``
    lists tasks whose recorded gold actions or outputs (``info.task``) are not ours.

    ``recorded_graded`` is False where τ-bench's record has no grade (``reward_info`` null):
    τ-bench rewards an episode that reaches its step limit 0 without grading it, and so does
    ``replay`` (a cut-off episode scores 0)."""
    if tasks is None:
        raise DataError("--regrade needs the tasks the file was run on: pass --data-dir (a τ-bench airline "
                        "directory); files that `agentgrpo eval --format tau-bench` wrote carry their settings")
    agree, skipped, disagreements, differs = 0, 0, [], set()
    for r in results:
        task = tasks[r.key]
        recorded_task = r.info.get("task")
        if isinstance(recorded_task, Mapping) and not _same_task(recorded_task, task.task):
            differs.add(r.key)
        if r.aborted:
            skipped += 1
            continue
        grade = replay(task.bundle.domain, task.task, r.traj, r.ours.get("termination"))
        if (grade.reward == 1.0) == r.success:
            agree += 1
            continue
        disagreements.append({"task_id": r.task_id, "trial": r.trial, "recorded": r.reward, "regraded": grade.reward,
                              "db_match": grade.db_match, "recorded_graded": bool(r.info.get("reward_info", True)),
                              "outputs_missing": [o for o, found in grade.outputs_found.items() if not found]})
    return {"agree": agree, "disagree": len(disagreements), "skipped": skipped,
            "task_ids": sorted({d["task_id"] for d in disagreements}, key=str), "disagreements": disagreements,
            "task_differs": sorted(differs, key=lambda t: (len(t), t))}


def _same_task(recorded: Mapping[str, Any], task: Any) -> bool:
    actions = [a.to_dict() for a in task.actions]
    return recorded.get("actions", actions) == actions and list(recorded.get("outputs", task.outputs)) == task.outputs


def score_file(path: str | Path, data_dir: str | None = None):
    """Read one file and resolve its tasks: ``(results, tasks or None)``."""
    from agentgrpo.eval.tau_bench_io import read_results

    results = read_results(path)
    return results, task_source(results, data_dir)
