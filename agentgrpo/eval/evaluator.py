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

The tasks are the env's own splits, or ``tasks_per_split`` fresh ones per split from
held-out worlds (``agentgrpo.eval.tasks``). docs/evaluation.md says what is reproducible.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentgrpo.config import require
from agentgrpo.endpoint import RequestConfig
from agentgrpo.envs.config import EnvConfig
from agentgrpo.envs.registry import (
    SPLIT_NAMES,
    VALIDATION_SPLIT,
    EnvBundle,
    build_env,
    check_heldout,
    split_families,
)
from agentgrpo.eval.summary import summarize
from agentgrpo.policy.settings import EvalPolicyConfig
from agentgrpo.rollout.engine import RolloutConfig
from agentgrpo.train.tracking import TrackingConfig

if TYPE_CHECKING:
    from agentgrpo.eval.tasks import EvalTask

AGENT_POLICIES = ("oracle", "openai")
"""``policy`` values that are not checkpoints."""
EVAL_SPLITS = (*SPLIT_NAMES, VALIDATION_SPLIT)
__all__ = ["EvalConfig", "EvalReport", "EpisodeRecord", "evaluate", "summarize", "user_seed"]


@dataclass
class EndpointConfig:
    base_url: str = "http://127.0.0.1:8000/v1"
    """OpenAI-compatible server of the evaluated model (policy=openai)."""
    model: str = "gpt-4o"
    """The model name that server serves (``GET <base_url>/models`` lists them)."""
    api_key_env: str = "OPENAI_API_KEY"
    max_tokens: int | None = None
    """Longest assistant turn requested (null: none sent, the server's limit applies)."""
    request: RequestConfig = field(default_factory=RequestConfig)
    """Deadline, retries and size cap of each request; one that still fails aborts its episode."""

    def __post_init__(self) -> None:
        require(self.max_tokens is None or self.max_tokens >= 1, "endpoint.max_tokens", self.max_tokens,
                "must be >= 1 or null")


@dataclass
class EvalConfig:
    policy: EvalPolicyConfig = field(default_factory=EvalPolicyConfig)
    """What is evaluated (``policy=DIR`` is short for ``policy.init=DIR``): a checkpoint
    directory, a Hub id, ``oracle`` (the teacher) or ``openai`` (see ``endpoint``); and
    for a checkpoint, its device and precision."""
    seed: int = 0
    out_dir: str = "runs/eval"
    env: EnvConfig = field(default_factory=EnvConfig)
    """The training environment: its splits are evaluated (``tasks_per_split`` = 0), or say
    which families each held-out split draws (covered_seen: families with demonstrations…)."""
    splits: list[str] = field(default_factory=lambda: list(SPLIT_NAMES))
    """Splits evaluated: covered_seen, uncovered_seen, unseen (test), or validation alone
    (what checkpoints and settings are chosen by; never mixed with the test splits)."""
    tasks_per_split: int = 0
    """0: the tasks of env's own splits (the training pool's covered_seen / uncovered_seen
    tasks, its unseen tasks, its env.splits.validation tasks): cheap, the seed's layout.
    N > 0: N fresh tasks per split from held-out worlds (``heldout_seed``), each split the
    families that stand there in training; one episode moves pass^1 by 1/(N·trials)."""
    heldout_seed: int = 0
    """Which held-out worlds (tasks_per_split > 0): test worlds have seeds 10^9 + 10^4·s + w,
    validation worlds 2·10^9 + 10^4·s + w, so neither meets a training world (env.seed < 10^9)."""
    trials: int = 4
    """Trials per task (n of pass^k); each with a differently seeded user."""
    task_ids: list[str] | None = None
    """Evaluate only these tasks of ``splits`` (τ-bench's ``--task-ids``; ids as ``agentgrpo env
    tasks`` lists them, τ-bench's are its indices "0".."49"); null = every task. A task keeps
    the user seeds it has in the full run, so the subset pairs with it."""
    rollout: RolloutConfig = field(default_factory=lambda: RolloutConfig(temperature=0.0))
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)
    max_batch: int = 256
    """Episodes rolled out together for a checkpoint (memory bound)."""
    concurrency: int = 8
    """Episodes played at once (threads) for the oracle and endpoint policies."""
    save_transcripts: bool = True
    """Keep each episode's messages in transcripts.jsonl (the metrics' fields are always kept)."""
    progress: bool = True
    """A progress bar with the finished/aborted counts and the time left."""
    logging: TrackingConfig = field(default_factory=TrackingConfig)
    """Trackers that also get the summary (``logging.trackers=[wandb]``), as in sft and train."""

    def __post_init__(self) -> None:
        if isinstance(self.policy, str):  # EvalConfig(policy="oracle") from Python, like policy=oracle on the CLI
            self.policy = EvalPolicyConfig(init=self.policy)
        require(self.trials >= 1, "trials", self.trials, "must be >= 1")
        unknown = [s for s in self.splits if s not in EVAL_SPLITS]
        require(bool(self.splits) and not unknown and len(set(self.splits)) == len(self.splits), "splits",
                self.splits, f"must be a non-empty list of distinct names from {list(EVAL_SPLITS)}")
        require(VALIDATION_SPLIT not in self.splits or self.splits == [VALIDATION_SPLIT], "splits", self.splits,
                "evaluate validation on its own (splits=[validation]): it chooses checkpoints, the test splits "
                "report them")
        require(self.tasks_per_split >= 0, "tasks_per_split", self.tasks_per_split,
                "must be >= 0 (0 = the env's own splits)")
        check_heldout(self.env, self.tasks_per_split)  # the domain's: e.g. airline's need generated worlds
        require(self.task_ids is None or len(self.task_ids) > 0, "task_ids", self.task_ids,
                "must be a non-empty list of task ids, or null for every task")
        require(0 <= self.heldout_seed < 100_000, "heldout_seed", self.heldout_seed, "must be in [0, 100000)")
        require(self.max_batch >= 1, "max_batch", self.max_batch, "must be >= 1 (episodes rolled out together)")
        require(self.concurrency >= 1, "concurrency", self.concurrency, "must be >= 1 (episodes at once)")

    @property
    def policy_kind(self) -> str:
        """``oracle``, ``openai`` or ``checkpoint``."""
        return self.policy.init if self.policy.init in AGENT_POLICIES else "checkpoint"


@dataclass
class EpisodeRecord:
    """One evaluated episode, reduced to what the metrics need (plus its transcript).

    aborted: a request to a server failed for good (``error`` says which); the episode
    counts in ``metrics["aborted"]`` only.
    """

    task_id: str
    split: str
    family: str
    trial: int
    reward: float
    has_error: bool
    turn_tokens: list[int]
    termination: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    aborted: bool = False
    error: str | None = None
    user_seed: int | None = None
    """Seed of this trial's user simulator (pairing two evaluations checks it); None in old logs."""
    process_score: float | None = None
    """PRM-Lite's process score of the episode (packaged weights), for the AUROC; None if unscored."""

    @property
    def key(self) -> tuple[str, int]:
        return (self.task_id, self.trial)


@dataclass
class EvalReport:
    policy: str
    trials: int
    temperature: float
    split_sizes: dict[str, int]
    metrics: dict[str, Any]
    per_task: list[dict[str, Any]]
    wall_seconds: float
    resumed: int = 0
    """Finished episodes taken from an earlier run's transcripts.jsonl (``--resume``)."""
    episodes_run: int = 0
    """Episodes played by this run (finished or aborted)."""
    seed: int = 0
    """The evaluation's seed (users' seeds, the sampler's): pairing needs the same one."""
    task_set: dict[str, Any] = field(default_factory=dict)
    """Where the tasks came from: ``source`` (env / heldout), ``tasks_per_split``, ``heldout_seed``,
    ``worlds`` (seeds of the held-out worlds used) and ``families`` (each split's)."""
    provenance: dict[str, Any] = field(default_factory=dict)
    """What ran (``agentgrpo.eval.provenance``): policy (path, or endpoint model and base URL),
    user, agentgrpo version and git commit, package versions, UTC date, resolved config."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> dict[str, Any]:
        """The compact form the quickstart's summary.json stores per checkpoint."""
        m = self.metrics
        return {
            "pass^1": dict(m["pass^1_by_split"]),
            "generalization": m["generalization"],
            "write_pass^1": m.get("write_pass^1"),
            "do_nothing_floor": m.get("do_nothing_floor"),
            "error_rate": m["error_rate"],
            "reasoning_depth_p50": m["reasoning_depth_p50"],
            "aborted": m["aborted"],
            "ci": {"pass^1": m["ci"]["pass^k"][1], "pass^1_by_split": dict(m["ci"]["pass^1_by_split"]),
                   "generalization": m["ci"]["generalization"]},
        }

    def to_markdown(self) -> str:
        from agentgrpo.eval.markdown import report_markdown

        return report_markdown(self)


def evaluate(config: EvalConfig, bundle: EnvBundle | None = None, resume: bool = False,
             force: bool = False) -> EvalReport:
    """Run ``config.policy`` on every task of ``config.splits``; write and return the report.

    ``bundle``: the training environment (``build_env(config.env)`` when not given).
    ``resume``: keep the finished episodes of ``out_dir/transcripts.jsonl`` (an earlier,
    interrupted run of the same config) and play only the others.
    ``force``: evaluate into an ``out_dir`` that already holds files (its evaluation files
    are replaced); without it, or ``resume``, such a directory is refused (``ConfigError``).
    """
    from agentgrpo.eval.provenance import check_out_dir, provenance
    from agentgrpo.eval.runner import EpisodeLog, episode_jobs, run_jobs
    from agentgrpo.eval.tasks import eval_tasks, select_tasks

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
    (out / "eval.md").write_text(report.to_markdown())
    return report


def _task_set(config: EvalConfig, bundle: EnvBundle, tasks: list[EvalTask]) -> dict[str, Any]:
    """``EvalReport.task_set``: where the evaluated tasks came from."""
    selected = {"task_ids": list(config.task_ids)} if config.task_ids else {}
    if config.tasks_per_split == 0:
        return {"source": "env", "env_seed": config.env.seed, "env_source": config.env.source, **selected}
    families = split_families(config.env, bundle)
    worlds = sorted({t.bundle.world_seed for t in tasks if t.bundle.world_seed is not None})
    return {"source": "heldout", "tasks_per_split": config.tasks_per_split, "heldout_seed": config.heldout_seed,
            "worlds": worlds, "families": {s: families[s] for s in config.splits}, **selected}


def user_seed(config: EvalConfig, task_index: int, trial: int) -> int:
    """Seeds of the users: the same for every policy evaluated with the same config."""
    return config.seed * 1_000_003 + task_index * 101 + trial
