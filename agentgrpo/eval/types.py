"""What an evaluation produces: one ``EpisodeRecord`` per episode and the ``EvalReport``.

Plain dataclasses: ``agentgrpo.eval.runner`` writes records to ``transcripts.jsonl``,
``agentgrpo.eval.summary`` reduces them to metrics, ``agentgrpo.eval.markdown`` renders a report.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


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
            "pass^1": m["pass^k"][1],
            "pass^1_by_split": dict(m["pass^1_by_split"]),
            "family_pass^1": m.get("family_pass^1"),
            "tau_bench_pass^1": m.get("tau_bench_pass^1"),
            "generalization": m["generalization"],
            "write_pass^1": m.get("write_pass^1"),
            "no_write_pass^1": m.get("no_write_pass^1"),
            "cut_off": m.get("cut_off", 0),
            "do_nothing_floor": m.get("do_nothing_floor"),
            "error_rate": m["error_rate"],
            "reasoning_depth_p50": m["reasoning_depth_p50"],
            "aborted": m["aborted"],
            "ci": {"pass^1": m["ci"]["pass^k"][1], "pass^1_by_split": dict(m["ci"]["pass^1_by_split"]),
                   "generalization": m["ci"]["generalization"],
                   **{k: m["ci"][k] for k in ("family_pass^1", "tau_bench_pass^1", "write_pass^1",
                                                "no_write_pass^1") if k in m["ci"]}},
        }
