"""Playing an evaluation's episodes so that the run survives: concurrency, a log, resume, aborts.

* ``episode_jobs``: every (task, trial) of the run, each with its world and user seed.
* ``EpisodeLog``: ``transcripts.jsonl`` in ``out_dir``, one line per episode, appended and
  flushed the moment the episode ends; ``--resume`` reads it back and keeps the finished
  episodes (aborted ones are played again). The run's config is kept beside it
  (``eval_config.yaml``) and a resume with different settings is refused; ``read_eval_dir``
  reads both back (the reports made after an evaluation).
* ``run_jobs``: the oracle and endpoint policies play ``concurrency`` episodes at once on
  threads; a checkpoint plays them all in one rollout-engine run on ``max_batch`` rows. A
  progress bar shows finished and aborted episodes and the time left.

An episode is ``aborted`` when a request to a server (the evaluated endpoint, or the
LLM user's) fails for good after its retries: its record says why, and the run goes on.
Every finished episode's record carries its user seed and PRM-Lite process score
(packaged weights, as the trainer's ``score`` computes it).
"""
from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from agentgrpo.config import ConfigError, EndpointError, MissingFileError, differing_keys, from_dict, to_dict, to_yaml
from agentgrpo.envs.episode import run_episode
from agentgrpo.envs.registry import EnvBundle, domain_oracle, make_env
from agentgrpo.envs.types import ABORTED, Task
from agentgrpo.eval.config import EvalConfig, user_seed
from agentgrpo.eval.tasks import EvalTask
from agentgrpo.eval.types import EpisodeRecord
from agentgrpo.openai_client import OpenAIChatPolicy, llm_user_client
from agentgrpo.progress import progress_bar
from agentgrpo.rewards.messages import opening_messages
from agentgrpo.rewards.prm_lite import PRMLite

LOG_FILE = "transcripts.jsonl"
CONFIG_FILE = "eval_config.yaml"
RESUME_MAY_CHANGE = ("out_dir", "concurrency", "max_batch", "progress", "save_transcripts", "endpoint.request.*",
                     "env.user.request.*", "policy.device", "policy.autocast",
                     "policy.cpu_autocast")
"""Settings a resumed evaluation may change (how episodes are played, not which or how they score):
``fnmatch`` patterns over dotted keys."""
PRM = PRMLite()
"""The process scorer of the AUROC (packaged weights; stateless, so threads share it)."""


@dataclass(frozen=True)
class EpisodeJob:
    """One episode to play: a task's trial, with the task's position (which seeds its user)
    and the world it runs in."""

    index: int
    split: str
    task: Task
    trial: int
    bundle: EnvBundle = field(compare=False, repr=False)
    user_seed: int = 0

    @property
    def key(self) -> tuple[str, int]:
        return (self.task.task_id, self.trial)


def episode_jobs(config: EvalConfig, tasks: list[EvalTask]) -> list[EpisodeJob]:
    """Every trial of every task (of ``config.task_ids`` when set); a task's user seeds come from
    its position in ``tasks``, so a selection plays the episodes the full run would."""
    wanted = set(config.task_ids) if config.task_ids else None
    return [EpisodeJob(i, t.split, t.task, trial, t.bundle, user_seed(config, i, trial))
            for i, t in enumerate(tasks) if wanted is None or t.task.task_id in wanted
            for trial in range(config.trials)]


class EpisodeLog:
    """``out_dir/transcripts.jsonl``, appended as episodes end (thread-safe)."""

    def __init__(self, config: EvalConfig, jobs: list[EpisodeJob], resume: bool):
        self.out = Path(config.out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.path = self.out / LOG_FILE
        self.save_messages = config.save_transcripts
        self.finished: dict[tuple[str, int], EpisodeRecord] = {}
        if resume:
            _check_resume_config(self.out / CONFIG_FILE, to_dict(config), to_dict(type(config)()))
            wanted = {job.key for job in jobs}
            self.finished = {r.key: r for r in read_records(self.path) if not r.aborted and r.key in wanted}
        self.resumed = len(self.finished)
        (self.out / CONFIG_FILE).write_text(to_yaml(config))
        self._rewrite(list(self.finished.values()))
        self._file = self.path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def append(self, record: EpisodeRecord) -> None:
        line = _record_line(record, self.save_messages)
        with self._lock:
            self._file.write(line)
            self._file.flush()

    def finish(self, records: list[EpisodeRecord]) -> None:
        """Close the log, rewritten in task order (it was written in finishing order)."""
        self._file.close()
        self._rewrite(records)

    def _rewrite(self, records: list[EpisodeRecord]) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            f.writelines(_record_line(r, self.save_messages) for r in records)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(self.path)


def _record_line(record: EpisodeRecord, save_messages: bool) -> str:
    data = asdict(record)
    if not save_messages:
        data["messages"] = []
    return json.dumps(data) + "\n"


def read_records(path: Path) -> list[EpisodeRecord]:
    """The records of a log; a line cut short by a kill (the last one) is skipped."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(EpisodeRecord(**json.loads(line)))
        except (ValueError, TypeError):
            continue
    return records


def read_eval_dir(out_dir: str | Path) -> tuple[EvalConfig, list[EpisodeRecord]]:
    """A finished (or interrupted) evaluation's saved config and records; a directory that holds
    no evaluation is a MissingFileError saying so."""
    out = Path(out_dir)
    if not (out / CONFIG_FILE).is_file() or not (out / LOG_FILE).is_file():
        raise MissingFileError(f"{out}: not an evaluation directory (it holds no {CONFIG_FILE} and {LOG_FILE}); "
                               "pass an `agentgrpo eval` out_dir")
    config = from_dict(EvalConfig, OmegaConf.to_container(OmegaConf.load(out / CONFIG_FILE), resolve=True))
    return config, read_records(out / LOG_FILE)


def _check_resume_config(path: Path, config: dict[str, Any], defaults: dict[str, Any]) -> None:
    """A resume plays on only with the saved settings (a key added since they were saved counts as
    unchanged while it holds the schema's ``defaults``: the code did that before it existed)."""
    if not path.is_file():
        return
    saved = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    changed = differing_keys(saved, config, may_change=RESUME_MAY_CHANGE, defaults=defaults)
    if changed:
        shown = ", ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in list(changed.items())[:6])
        raise ConfigError(f"--resume: the settings differ from the run in {path.parent} ({shown}); resume with the "
                          "same settings, or start afresh in another out_dir (or without --resume)")


# ---- playing ---------------------------------------------------------------------------
def run_jobs(config: EvalConfig, jobs: list[EpisodeJob], log: EpisodeLog) -> list[EpisodeRecord]:
    """Every job's record, in job order: the finished ones from the log, the rest played now."""
    todo = [job for job in jobs if job.key not in log.finished]
    played: dict[tuple[str, int], EpisodeRecord] = {}
    with progress_bar(len(jobs), f"eval[{config.policy.init}]", config.progress, initial=log.resumed) as bar:
        def done(record: EpisodeRecord) -> None:
            log.append(record)
            played[record.key] = record
            bar.update(1, aborted=sum(r.aborted for r in played.values()))

        if config.policy_kind == "checkpoint":
            _play_checkpoint(config, todo, done)
        else:
            _play_agents(config, todo, done)
    return [log.finished.get(job.key) or played[job.key] for job in jobs]


def _play_agents(config: EvalConfig, jobs: list[EpisodeJob], done: Callable[[EpisodeRecord], None]) -> None:
    """Oracle or endpoint policies: ``concurrency`` episodes at once through ``run_episode``."""
    user_client = llm_user_client(config.env.user)
    agent_client = None
    if config.policy_kind == "openai":
        e = config.endpoint
        agent_client = OpenAIChatPolicy.from_config(e.base_url, e.model, e.api_key_env, e.request, e.max_tokens)
    pool = ThreadPoolExecutor(max_workers=config.concurrency, thread_name_prefix="episode")
    try:
        futures = [pool.submit(_play_agent, config, job, user_client, agent_client) for job in jobs]
        for future in as_completed(futures):
            done(future.result())
    finally:  # on an error (or Ctrl-C) the episodes not started yet are dropped, the running ones end
        pool.shutdown(wait=True, cancel_futures=True)


def _play_agent(config: EvalConfig, job: EpisodeJob, user_client: Any,
                agent_client: OpenAIChatPolicy | None) -> EpisodeRecord:
    env = make_env(job.bundle, job.task, config.env, job.user_seed,
                   max_steps=config.rollout.max_turns, user_client=user_client, abort_on_endpoint_error=True)
    agent = _make_agent(config, job.bundle, job.task, agent_client)
    try:
        result = run_episode(env, agent)
    except EndpointError as e:  # the evaluated endpoint failed for good
        return _aborted(job, " ".join(str(e).split()))
    if result.termination == ABORTED:  # the LLM user's server failed for good
        return _aborted(job, result.info.get("error"), result.messages)
    turn_tokens = getattr(agent, "turn_tokens", None) or [_approx_tokens(s.text) for s in result.steps]
    process = PRM.score_steps(result.steps, opening_messages(result.messages)).process_score
    return EpisodeRecord(job.task.task_id, job.split, job.task.family, job.trial, result.reward,
                         any(s.error for s in result.steps), turn_tokens, result.termination, result.messages,
                         user_seed=job.user_seed, process_score=process)


def _aborted(job: EpisodeJob, error: str | None, messages: list[dict[str, Any]] | None = None) -> EpisodeRecord:
    return EpisodeRecord(job.task.task_id, job.split, job.task.family, job.trial, 0.0, False, [], ABORTED,
                         messages or [], aborted=True, error=error, user_seed=job.user_seed)


def _make_agent(config: EvalConfig, bundle: EnvBundle, task: Task, client: OpenAIChatPolicy | None) -> Any:
    if config.policy_kind == "oracle":
        return domain_oracle(config.env, bundle, task)
    from agentgrpo.eval.endpoint_agent import EndpointAgent

    e = config.endpoint
    return EndpointAgent(bundle.domain, e.base_url, e.model, e.api_key_env, config.rollout.temperature, client=client)


def _approx_tokens(text: str) -> int:
    """Token count where no tokenizer is at hand (the oracle): ~4 characters per token."""
    return max(1, round(len(text) / 4)) if text else 0


def _play_checkpoint(config: EvalConfig, jobs: list[EpisodeJob], done: Callable[[EpisodeRecord], None]) -> None:
    """A checkpoint (or Hub model): every episode through one rollout engine run, ``max_batch``
    rows at a time (an episode that ends hands its row to the next), each logged as it ends."""
    import dataclasses

    import torch

    from agentgrpo.agent.types import Trajectory
    from agentgrpo.policy.device import autocast, resolve_device
    from agentgrpo.policy.hf import load_agent, resolve_view
    from agentgrpo.rollout.engine import EpisodeSpec, RolloutEngine, copy_kinds

    if not jobs:
        return
    device = resolve_device(config.policy.device)
    domain = jobs[0].bundle.domain  # tools and policy text are the same in every generated world
    model, chat = load_agent(config.policy.init, domain.tool_schemas(), domain.policy,
                             getattr(torch, config.policy.dtype), device)
    rows = min(config.max_batch, config.rollout.max_batch or config.max_batch)
    policy_env = resolve_view(config.env, config.policy.init)  # the policy's view of ids
    engine = RolloutEngine(model, chat, dataclasses.replace(config.rollout, max_batch=rows),
                           copy_kinds(config.rollout, policy_env))
    user_client = llm_user_client(config.env.user)
    specs = [EpisodeSpec(make_env(job.bundle, job.task, policy_env, job.user_seed,
                                  max_steps=config.rollout.max_turns, user_client=user_client,
                                  abort_on_endpoint_error=True),
                         job.task.task_id, job.task.task_id, job.trial)
             for job in jobs]

    def ended(index: int, traj: Trajectory) -> None:
        job = jobs[index]
        if traj.termination == ABORTED:
            done(_aborted(job, traj.info.get("error"), traj.transcript))
            return
        done(EpisodeRecord(job.task.task_id, job.split, job.task.family, job.trial, traj.outcome_reward,
                           traj.has_error, [t.num_tokens for t in traj.turns], traj.termination, traj.transcript,
                           user_seed=job.user_seed, process_score=PRM.score_trajectory(traj).process_score))

    with autocast(device, config.policy.autocast_devices):
        engine.run(specs, seed=config.seed, on_episode_end=ended)
