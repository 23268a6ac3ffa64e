"""The evaluator's settings: what is evaluated, on which tasks, how often (``EvalConfig``).

The schema of ``configs/eval.yaml``; its values are checked here at construction, what
only the machine can tell in ``agentgrpo.eval.preflight``. ``user_seed`` derives each
trial's user seed from the config, so two evaluations with one config pair episode by episode.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from agentgrpo.config import require
from agentgrpo.endpoint import RequestConfig
from agentgrpo.envs.config import EnvConfig
from agentgrpo.envs.registry import SPLIT_NAMES, VALIDATION_SPLIT, check_heldout
from agentgrpo.policy.settings import EvalPolicyConfig
from agentgrpo.rollout.config import RolloutConfig
from agentgrpo.tracking import TrackingConfig

AGENT_POLICIES = ("oracle", "openai")
"""``policy`` values that are not checkpoints."""
EVAL_SPLITS = (*SPLIT_NAMES, VALIDATION_SPLIT)


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
    tasks_per_family: int = 0
    """N > 0: instead of ``tasks_per_split``, N fresh tasks of every family of ``splits`` from
    held-out worlds, so overall pass^1 weighs every family alike (a split's share is then its
    number of families). 0: ``tasks_per_split`` decides."""
    heldout_seed: int = 0
    """Which held-out worlds (tasks_per_split or tasks_per_family > 0): test worlds have seeds 10^9 + 10^4·s + w,
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
    """Episodes decoded together for a checkpoint: the rollout engine's rows (memory bound); an
    episode that ends hands its row to the next waiting one."""
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
        require(self.tasks_per_family >= 0, "tasks_per_family", self.tasks_per_family,
                "must be >= 0 (0 = tasks_per_split decides)")
        require(not (self.tasks_per_family and self.tasks_per_split), "tasks_per_family", self.tasks_per_family,
                f"cannot be set with tasks_per_split={self.tasks_per_split} (both size the task set): "
                "set one of them to 0")
        # the domain's own check: e.g. the airline's held-out tasks need generated worlds
        check_heldout(self.env, self.tasks_per_split or self.tasks_per_family)
        require(self.task_ids is None or len(self.task_ids) > 0, "task_ids", self.task_ids,
                "must be a non-empty list of task ids, or null for every task")
        require(0 <= self.heldout_seed < 100_000, "heldout_seed", self.heldout_seed, "must be in [0, 100000)")
        require(self.max_batch >= 1, "max_batch", self.max_batch,
                "must be >= 1 (rows the rollout engine decodes together)")
        require(self.concurrency >= 1, "concurrency", self.concurrency, "must be >= 1 (episodes at once)")

    @property
    def policy_kind(self) -> str:
        """``oracle``, ``openai`` or ``checkpoint``."""
        return self.policy.init if self.policy.init in AGENT_POLICIES else "checkpoint"


def user_seed(config: EvalConfig, task_index: int, trial: int) -> int:
    """Seeds of the users: the same for every policy evaluated with the same config."""
    return config.seed * 1_000_003 + task_index * 101 + trial
