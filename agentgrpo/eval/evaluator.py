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
assistant tokens per turn) and the aborted count, written as ``eval.json`` and ``eval.md``.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentgrpo.config import require
from agentgrpo.endpoint import RequestConfig
from agentgrpo.envs.airline.factory import SPLIT_NAMES, TRAIN_SPLITS, EnvBundle, EnvConfig, build_env
from agentgrpo.eval.metrics import generalization, pass_at_k, pass_hat_k, percentile_50
from agentgrpo.policy.settings import EvalPolicyConfig
from agentgrpo.rollout.engine import RolloutConfig

AGENT_POLICIES = ("oracle", "openai")
"""``policy`` values that are not checkpoints."""


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
    splits: list[str] = field(default_factory=lambda: list(SPLIT_NAMES))
    trials: int = 4
    """Trials per task (n of pass^k); each with a differently seeded user."""
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

    def __post_init__(self) -> None:
        if isinstance(self.policy, str):  # EvalConfig(policy="oracle") from Python, like policy=oracle on the CLI
            self.policy = EvalPolicyConfig(init=self.policy)
        require(self.trials >= 1, "trials", self.trials, "must be >= 1")
        unknown = [s for s in self.splits if s not in SPLIT_NAMES]
        require(bool(self.splits) and not unknown, "splits", self.splits,
                f"must be a non-empty list of {list(SPLIT_NAMES)}")
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> dict[str, Any]:
        """The compact form the quickstart's summary.json stores per checkpoint."""
        m = self.metrics
        return {
            "pass^1": dict(m["pass^1_by_split"]),
            "generalization": m["generalization"],
            "error_rate": m["error_rate"],
            "reasoning_depth_p50": m["reasoning_depth_p50"],
            "aborted": m["aborted"],
        }

    def to_markdown(self) -> str:
        m = self.metrics
        left_out = f" ({m['aborted']} aborted episode(s) left out)" if m["aborted"] else ""
        lines = [
            f"# Evaluation: `{self.policy}`",
            "",
            f"{self.trials} trial(s) per task, temperature {self.temperature}, "
            f"splits {self.split_sizes}, {self.wall_seconds:.0f} s. {m['episodes']} episodes finished, "
            f"{m['aborted']} aborted (a server request failed for good; left out of every metric).",
            "",
            "| metric | value |",
            "|---|---|",
        ]
        for k, value in m["pass^k"].items():
            lines.append(f"| pass^{k} | {value:.3f}{_over(m, k, left_out)} |")
        for k, value in m["pass@k"].items():
            lines.append(f"| pass@{k} | {value:.3f}{_over(m, k, left_out)} |")
        for split, value in m["pass^1_by_split"].items():
            lines.append(f"| pass^1 {split} | {value:.3f} |")
        lines += [
            f"| Generalization pass^1 | {m['generalization']:.3f} |",
            f"| error rate | {m['error_rate']:.3f} |",
            f"| reasoning depth (p50 tokens/turn) | {m['reasoning_depth_p50']:.0f} |",
            f"| aborted episodes | {m['aborted']} |",
            "",
            "| family | pass^1 |",
            "|---|---|",
        ]
        lines += [f"| {family} | {value:.3f} |" for family, value in sorted(m["pass^1_by_family"].items())]
        return "\n".join(lines) + "\n"


def _over(metrics: dict[str, Any], k: int, left_out: str) -> str:
    """What a pass^k cell is computed over, when that is not every task of the run."""
    tasks, all_tasks = metrics["pass^k_tasks"][k], metrics["tasks"]
    partial = f" over {tasks} of {all_tasks} tasks" if tasks != all_tasks else ""
    return f"{partial}{left_out}" if (partial or left_out) else ""


def summarize(records: list[EpisodeRecord], trials: int, split_sizes: dict[str, int]) -> tuple[dict, list]:
    """Metrics of DESIGN.md §7 from episode records (pure; tests call it directly).

    Aborted episodes are left out of everything but ``metrics["aborted"]``; pass^k and
    pass@k are over the tasks with at least k finished trials (``pass^k_tasks[k]``).
    """
    finished = [r for r in records if not r.aborted]
    by_task: dict[str, list[EpisodeRecord]] = {}
    for record in finished:
        by_task.setdefault(record.task_id, []).append(record)
    per_task = [
        {"task_id": tid, "split": rs[0].split, "family": rs[0].family,
         "successes": [r.reward == 1.0 for r in sorted(rs, key=lambda r: r.trial)]}
        for tid, rs in by_task.items()
    ]

    def pass1(rows: list[dict]) -> float:
        return pass_hat_k([r["successes"] for r in rows], 1) if rows else 0.0

    def at_least(k: int) -> list[list[bool]]:
        return [t["successes"] for t in per_task if len(t["successes"]) >= k]

    by_split = {s: pass1([t for t in per_task if t["split"] == s]) for s in split_sizes if split_sizes[s]}
    train_rows = [t for t in per_task if t["split"] in TRAIN_SPLITS]
    if train_rows:
        by_split["train"] = pass1(train_rows)
    families = sorted({t["family"] for t in per_task})
    metrics = {
        "pass^k": {k: pass_hat_k(at_least(k), k) for k in range(1, trials + 1)},
        "pass@k": {k: pass_at_k(at_least(k), k) for k in range(1, trials + 1)},
        "pass^k_tasks": {k: len(at_least(k)) for k in range(1, trials + 1)},
        "pass^1_by_split": by_split,
        "pass^1_by_family": {f: pass1([t for t in per_task if t["family"] == f]) for f in families},
        "generalization": generalization(by_split, split_sizes),
        "error_rate": sum(r.has_error for r in finished) / len(finished) if finished else 0.0,
        "reasoning_depth_p50": percentile_50([n for r in finished for n in r.turn_tokens]),
        "episodes": len(finished),
        "aborted": len(records) - len(finished),
        "tasks": len({r.task_id for r in records}),
    }
    return metrics, per_task


def evaluate(config: EvalConfig, bundle: EnvBundle | None = None, resume: bool = False) -> EvalReport:
    """Run ``config.policy`` on every task of ``config.splits``; write and return the report.

    ``resume``: keep the finished episodes of ``out_dir/transcripts.jsonl`` (an earlier,
    interrupted run of the same config) and play only the others.
    """
    from agentgrpo.eval.runner import EpisodeLog, episode_jobs, run_jobs

    start = time.perf_counter()
    bundle = bundle or build_env(config.env)
    jobs = episode_jobs(config, bundle)
    log = EpisodeLog(config, jobs, resume=resume)
    records = run_jobs(config, bundle, jobs, log)
    log.finish(records)
    split_sizes = {s: len(bundle.splits[s]) for s in config.splits}
    metrics, per_task = summarize(records, config.trials, split_sizes)
    report = EvalReport(config.policy.init, config.trials, config.rollout.temperature, split_sizes, metrics,
                        per_task, time.perf_counter() - start, resumed=log.resumed,
                        episodes_run=len(records) - log.resumed)
    out = Path(config.out_dir)
    (out / "eval.json").write_text(json.dumps(report.to_dict(), indent=2))
    (out / "eval.md").write_text(report.to_markdown())
    return report


def user_seed(config: EvalConfig, task_index: int, trial: int) -> int:
    """Seeds of the users: the same for every policy evaluated with the same config."""
    return config.seed * 1_000_003 + task_index * 101 + trial
