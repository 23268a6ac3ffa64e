"""The independent pass^k evaluator: any policy, any task set, n trials per task.

Policies: a checkpoint (batched through the rollout engine), the oracle agent, or a
model behind an OpenAI-compatible endpoint (one episode at a time, native tools).
Every trial of a task uses a differently seeded user simulator; the agent samples at
``rollout.temperature`` (0 = greedy, τ-bench's default). The report has pass^k and
pass@k for k = 1..n, pass^1 per split and per family, the seed's Generalization
pass^1, the error rate and the reasoning depth (p50 assistant tokens per turn), and is
written as JSON, a markdown table and a JSONL file of transcripts.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentgrpo.config import require
from agentgrpo.envs.airline.factory import SPLIT_NAMES, TRAIN_SPLITS, EnvBundle, EnvConfig, build_env, make_env
from agentgrpo.eval.metrics import generalization, pass_at_k, pass_hat_k, percentile_50
from agentgrpo.policy.openai_client import llm_user_client
from agentgrpo.rollout.engine import RolloutConfig


@dataclass
class EndpointConfig:
    base_url: str = "http://127.0.0.1:8000/v1"
    """OpenAI-compatible server of the evaluated model (policy=openai)."""
    model: str = "gpt-4o"
    api_key_env: str = "OPENAI_API_KEY"


@dataclass
class EvalConfig:
    policy: str = "oracle"
    """A checkpoint directory, ``oracle`` (the teacher) or ``openai`` (see ``endpoint``)."""
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
    save_transcripts: bool = True

    def __post_init__(self) -> None:
        require(self.trials >= 1, "trials", self.trials, "must be >= 1")
        unknown = [s for s in self.splits if s not in SPLIT_NAMES]
        require(bool(self.splits) and not unknown, "splits", self.splits,
                f"must be a non-empty list of {list(SPLIT_NAMES)}")
        require(self.max_batch >= 1, "max_batch", self.max_batch, "must be >= 1 (episodes rolled out together)")


@dataclass
class EpisodeRecord:
    """One evaluated episode, reduced to what the metrics need (plus its transcript)."""

    task_id: str
    split: str
    family: str
    trial: int
    reward: float
    has_error: bool
    turn_tokens: list[int]
    termination: str
    messages: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class EvalReport:
    policy: str
    trials: int
    temperature: float
    split_sizes: dict[str, int]
    metrics: dict[str, Any]
    per_task: list[dict[str, Any]]
    wall_seconds: float

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
        }

    def to_markdown(self) -> str:
        m = self.metrics
        lines = [
            f"# Evaluation: `{self.policy}`",
            "",
            f"{self.trials} trial(s) per task, temperature {self.temperature}, "
            f"splits {self.split_sizes}, {self.wall_seconds:.0f} s.",
            "",
            "| metric | value |",
            "|---|---|",
        ]
        for k, value in m["pass^k"].items():
            lines.append(f"| pass^{k} | {value:.3f} |")
        for k, value in m["pass@k"].items():
            lines.append(f"| pass@{k} | {value:.3f} |")
        for split, value in m["pass^1_by_split"].items():
            lines.append(f"| pass^1 {split} | {value:.3f} |")
        lines += [
            f"| Generalization pass^1 | {m['generalization']:.3f} |",
            f"| error rate | {m['error_rate']:.3f} |",
            f"| reasoning depth (p50 tokens/turn) | {m['reasoning_depth_p50']:.0f} |",
            "",
            "| family | pass^1 |",
            "|---|---|",
        ]
        lines += [f"| {family} | {value:.3f} |" for family, value in sorted(m["pass^1_by_family"].items())]
        return "\n".join(lines) + "\n"


def summarize(records: list[EpisodeRecord], trials: int, split_sizes: dict[str, int]) -> tuple[dict, list]:
    """Metrics of DESIGN.md §7 from episode records (pure; tests call it directly)."""
    by_task: dict[str, list[EpisodeRecord]] = {}
    for record in records:
        by_task.setdefault(record.task_id, []).append(record)
    per_task = [
        {"task_id": tid, "split": rs[0].split, "family": rs[0].family,
         "successes": [r.reward == 1.0 for r in sorted(rs, key=lambda r: r.trial)]}
        for tid, rs in by_task.items()
    ]
    outcomes = [t["successes"] for t in per_task]

    def pass1(rows: list[dict]) -> float:
        return pass_hat_k([r["successes"] for r in rows], 1) if rows else 0.0

    by_split = {s: pass1([t for t in per_task if t["split"] == s]) for s in split_sizes if split_sizes[s]}
    train_rows = [t for t in per_task if t["split"] in TRAIN_SPLITS]
    if train_rows:
        by_split["train"] = pass1(train_rows)
    families = sorted({t["family"] for t in per_task})
    metrics = {
        "pass^k": {k: pass_hat_k(outcomes, k) for k in range(1, trials + 1)},
        "pass@k": {k: pass_at_k(outcomes, k) for k in range(1, trials + 1)},
        "pass^1_by_split": by_split,
        "pass^1_by_family": {f: pass1([t for t in per_task if t["family"] == f]) for f in families},
        "generalization": generalization(by_split, split_sizes),
        "error_rate": sum(r.has_error for r in records) / len(records) if records else 0.0,
        "reasoning_depth_p50": percentile_50([n for r in records for n in r.turn_tokens]),
        "episodes": len(records),
    }
    return metrics, per_task


def evaluate(config: EvalConfig, bundle: EnvBundle | None = None) -> EvalReport:
    """Run ``config.policy`` on every task of ``config.splits``; write and return the report."""
    start = time.perf_counter()
    bundle = bundle or build_env(config.env)
    tasks = [(split, task) for split in config.splits for task in bundle.splits[split]]
    runner = _RUNNERS["checkpoint" if config.policy not in _RUNNERS else config.policy]
    records = runner(config, bundle, tasks)
    split_sizes = {s: len(bundle.splits[s]) for s in config.splits}
    metrics, per_task = summarize(records, config.trials, split_sizes)
    report = EvalReport(config.policy, config.trials, config.rollout.temperature, split_sizes, metrics,
                        per_task, time.perf_counter() - start)
    _write(config, report, records)
    return report


def user_seed(config: EvalConfig, task_index: int, trial: int) -> int:
    """Seeds of the users: the same for every policy evaluated with the same config."""
    return config.seed * 1_000_003 + task_index * 101 + trial


def _run_checkpoint(config: EvalConfig, bundle: EnvBundle, tasks: list) -> list[EpisodeRecord]:
    from agentgrpo.agent.chat import ChatFormat
    from agentgrpo.policy.hf import load_policy, read_agent_config
    from agentgrpo.rollout.engine import EpisodeSpec, RolloutEngine

    model, tokenizer = load_policy(config.policy)
    chat = ChatFormat(tokenizer, bundle.domain.tool_schemas(), bundle.domain.policy,
                      prompt_style=read_agent_config(config.policy)["prompt_style"])
    engine = RolloutEngine(model, chat, config.rollout)
    user_client = llm_user_client(config.env.user)
    jobs = [(split, task, i, trial) for i, (split, task) in enumerate(tasks) for trial in range(config.trials)]
    records = []
    for start in range(0, len(jobs), config.max_batch):
        chunk = jobs[start : start + config.max_batch]
        specs = [EpisodeSpec(make_env(bundle, task, config.env, user_seed(config, i, trial),
                                      max_steps=config.rollout.max_turns, user_client=user_client),
                             task.task_id, task.task_id, trial)
                 for split, task, i, trial in chunk]
        for (split, task, _, trial), traj in zip(chunk, engine.run(specs, seed=config.seed + start)):
            records.append(EpisodeRecord(task.task_id, split, task.family, trial, traj.outcome_reward,
                                         traj.has_error, [t.num_tokens for t in traj.turns], traj.termination,
                                         traj.messages))
    return records


def _run_agent(config: EvalConfig, bundle: EnvBundle, tasks: list) -> list[EpisodeRecord]:
    """Oracle or endpoint policies: one episode at a time through ``run_episode``."""
    from agentgrpo.envs.airline.core.environment import run_episode

    records = []
    user_client = llm_user_client(config.env.user)
    for i, (split, task) in enumerate(tasks):
        for trial in range(config.trials):
            env = make_env(bundle, task, config.env, user_seed(config, i, trial), max_steps=config.rollout.max_turns,
                           user_client=user_client)
            agent = _make_agent(config, bundle, task)
            result = run_episode(env, agent)
            turn_tokens = getattr(agent, "turn_tokens", None) or [
                _approx_tokens(s.text) for s in result.steps
            ]
            records.append(EpisodeRecord(task.task_id, split, task.family, trial, result.reward,
                                         any(s.error for s in result.steps), turn_tokens, result.termination,
                                         result.messages))
    return records


def _make_agent(config: EvalConfig, bundle: EnvBundle, task: Any) -> Any:
    if config.policy == "oracle":
        from agentgrpo.envs.airline.simulation.plans import oracle_agent

        return oracle_agent(bundle.domain, task)
    from agentgrpo.eval.endpoint_agent import EndpointAgent

    return EndpointAgent(bundle.domain, config.endpoint.base_url, config.endpoint.model,
                         config.endpoint.api_key_env, config.rollout.temperature)


def _approx_tokens(text: str) -> int:
    """Token count where no tokenizer is at hand (the oracle): ~4 characters per token."""
    return max(1, round(len(text) / 4)) if text else 0


_RUNNERS = {"checkpoint": _run_checkpoint, "oracle": _run_agent, "openai": _run_agent}


def _write(config: EvalConfig, report: EvalReport, records: list[EpisodeRecord]) -> None:
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.json").write_text(json.dumps(report.to_dict(), indent=2))
    (out / "eval.md").write_text(report.to_markdown())
    if config.save_transcripts:
        with open(out / "transcripts.jsonl", "w") as f:
            for record in records:
                f.write(json.dumps(asdict(record)) + "\n")
