"""The independent pass^k evaluator: any policy, any task set, n trials per task.

Policies: a checkpoint or Hub model (batched through the rollout engine on
``policy.device``), the oracle agent, or a model behind an OpenAI-compatible endpoint
(``policy=openai``: native tools, ``concurrency`` episodes at once). Every trial of a
task uses a differently seeded user simulator; the agent samples at
``rollout.temperature`` (0 = greedy, τ-bench's default).

The run survives failures (``agentgrpo.eval.runner``): each finished episode is
appended to ``transcripts.jsonl`` at once, ``--resume`` skips the finished ones, and an
episode whose server request still fails after its retries is ``aborted``: counted,
left out of every metric, never the end of the run. The report has pass^k and pass@k
for k = 1..n (over the tasks with at least k finished trials), pass^1 per split and per
family, the seed's Generalization pass^1, the error rate, the reasoning depth (p50
assistant tokens per turn) and the aborted count; each pass figure with its 95% bootstrap
interval over tasks, the do-nothing floor, pass^1 on write tasks and PRM-Lite's AUROC
(``agentgrpo.eval.summary``). It is written as ``eval.json`` and ``eval.md``.

The tasks are the env's own splits, or ``tasks_per_split`` fresh ones per split (or
``tasks_per_family`` of every family) from held-out worlds (``agentgrpo.eval.tasks``).
docs/evaluation.md says what is reproducible.

This module is the orchestration; the settings are ``agentgrpo.eval.config`` and the
records and report ``agentgrpo.eval.types`` (both re-exported here for callers).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from agentgrpo.envs.registry import EnvBundle, build_env, split_families
from agentgrpo.eval.config import AGENT_POLICIES, EVAL_SPLITS, EndpointConfig, EvalConfig, user_seed
from agentgrpo.eval.markdown import report_markdown
from agentgrpo.eval.provenance import check_out_dir, provenance
from agentgrpo.eval.runner import EpisodeLog, episode_jobs, run_jobs
from agentgrpo.eval.summary import summarize
from agentgrpo.eval.tasks import EvalTask, eval_tasks, select_tasks
from agentgrpo.eval.types import EpisodeRecord, EvalReport

__all__ = ["AGENT_POLICIES", "EVAL_SPLITS", "EndpointConfig", "EpisodeRecord", "EvalConfig", "EvalReport", "evaluate",
           "summarize", "user_seed"]


def evaluate(config: EvalConfig, bundle: EnvBundle | None = None, resume: bool = False,
             force: bool = False) -> EvalReport:
    """Run ``config.policy`` on every task of ``config.splits``; write and return the report.

    ``bundle``: the training environment (``build_env(config.env)`` when not given).
    ``resume``: keep the finished episodes of ``out_dir/transcripts.jsonl`` (an earlier,
    interrupted run of the same config) and play only the others.
    ``force``: evaluate into an ``out_dir`` that already holds files (its evaluation files
    are replaced); without it, or ``resume``, such a directory is refused (``ConfigError``).
    """
    check_out_dir(config.out_dir, resume=resume, force=force)
    start = time.perf_counter()
    bundle = bundle or build_env(config.env)
    all_tasks = eval_tasks(config, bundle)
    jobs = episode_jobs(config, all_tasks)
    tasks = select_tasks(all_tasks, config.task_ids)
    log = EpisodeLog(config, jobs, resume=resume)
    records = run_jobs(config, jobs, log)
    log.finish(records)
    split_sizes = {s: sum(t.split == s for t in tasks) for s in config.splits}
    facts = {t.task.task_id: t.facts for t in tasks}
    metrics, per_task = summarize(records, config.trials, split_sizes, facts)
    report = EvalReport(config.policy.init, config.trials, config.rollout.temperature, split_sizes, metrics,
                        per_task, time.perf_counter() - start, resumed=log.resumed,
                        episodes_run=len(records) - log.resumed, seed=config.seed,
                        task_set=_task_set(config, bundle, tasks), provenance=provenance(config))
    out = Path(config.out_dir)
    (out / "eval.json").write_text(json.dumps(report.to_dict(), indent=2))
    (out / "eval.md").write_text(report_markdown(report))
    return report


def _task_set(config: EvalConfig, bundle: EnvBundle, tasks: list[EvalTask]) -> dict[str, Any]:
    """``EvalReport.task_set``: where the evaluated tasks came from."""
    selected = {"task_ids": list(config.task_ids)} if config.task_ids else {}
    if config.tasks_per_split == 0 and config.tasks_per_family == 0:
        return {"source": "env", "env_seed": config.env.seed, "env_source": config.env.source, **selected}
    families = split_families(config.env, bundle)
    worlds = sorted({t.bundle.world_seed for t in tasks if t.bundle.world_seed is not None})
    return {"source": "heldout", "tasks_per_split": config.tasks_per_split,
            "tasks_per_family": config.tasks_per_family, "heldout_seed": config.heldout_seed,
            "worlds": worlds, "families": {s: families[s] for s in config.splits}, **selected}
