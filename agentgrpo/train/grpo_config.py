"""Settings of the GRPO trainer: the schema of ``configs/grpo.yaml`` and its experiments.

Each experiment of DESIGN.md §1 is a handful of values here (``configs/experiment/*.yaml``):
the advantage estimator (``algo.adv_estimator``), the PRM-Lite coefficient
(``reward.process_coef``) and the LLDS weight (``algo.llds_coef``). The trainer reads
them and never branches on the experiment's name. The ``algo`` section is
``agentgrpo.algos.ObjectiveSettings``, the objective's one settings object, which the TRL
and veRL integrations take too (``agentgrpo hosts``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from agentgrpo.algos import ObjectiveSettings, updates_per_rollout
from agentgrpo.config import ConfigError, require
from agentgrpo.envs.config import EnvConfig
from agentgrpo.envs.registry import SPLIT_NAMES
from agentgrpo.policy.settings import PolicyConfig
from agentgrpo.rollout.config import RolloutConfig
from agentgrpo.tracking import TrackingConfig


@dataclass
class RewardConfig:
    process_coef: float = 0.0
    """Reward = outcome + process_coef · PRM-Lite process score (0.3 in the seed study)."""
    prm_weights: str | None = None
    """A PRM-Lite YAML to use instead of the packaged weights."""

    def __post_init__(self) -> None:
        require(self.process_coef >= 0, "reward.process_coef", self.process_coef, "must be >= 0")


@dataclass
class TrainerConfig:
    steps: int = 12
    """GRPO steps (one rollout batch each)."""
    tasks_per_step: int = 4
    """Tasks sampled per step (the seed: 4)."""
    group_size: int = 8
    """Trajectories per task: the GRPO group G (the seed: 8)."""
    ppo_epochs: int = 1
    """Passes over each rollout batch."""
    mini_batch_size: int = 16
    """Trajectories per optimizer step; several mini-batches per rollout make LLDS active
    (the default: 2 optimizer steps per rollout of 4 × 8)."""
    micro_batch_size: int = 8
    """Trajectories per forward/backward (gradient accumulation inside a mini-batch)."""
    lr: float = 5e-5
    """AdamW learning rate (the seed used 5e-6 for 7B; tiny models need more; 2e-4 broke the tiny
    model's tool-call format in 3 steps, docs/results/grpo-tuning.md)."""
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW's (β1, β2), each in [0, 1)."""
    warmup_steps: int = 0
    """Linear warm-up, in optimizer steps."""
    lr_schedule: Literal["constant", "cosine"] = "constant"
    max_grad_norm: float = 1.0
    """Gradients are clipped to this global norm (> 0)."""
    skip_zero_grad_steps: bool = True
    """Take no optimizer step on a mini-batch whose gradient is exactly zero (every group
    saturated, no KL or entropy term): neither the weights, AdamW's moments and step count nor
    the LR schedule advance. AdamW would otherwise keep moving the weights along its
    momentum: after one real step, the next zero-gradient steps still move 67%, 52%, 42%, … of
    a full step (β = 0.9, 0.999), on batches that carry no signal at all. (False before it
    became the default: a checkpoint that lacks or disables it resumes with it off.)"""
    dynamic_sampling: bool = False
    """DAPO's dynamic sampling: leave out groups whose rewards (``informative_by``) are all
    equal and roll out more tasks until ``tasks_per_step`` informative groups are collected
    (the first ones, in draw order) or ``max_generation_rounds`` rounds were rolled out."""
    max_generation_rounds: int = 3
    """Generation rounds per step under dynamic sampling, the first included; with fewer
    informative groups the step trains on those it has (none: no update)."""
    informative_by: Literal["outcome", "reward"] = "outcome"
    """Which reward must differ within a group for dynamic sampling to keep it: the outcome
    (DAPO's accuracy filter; PRM-Lite still ranks episodes inside kept groups) or the total
    reward (outcome + process_coef · PRM-Lite: any group with a non-zero advantage)."""
    task_sampler: Literal["uniform", "frontier"] = "uniform"
    """How training tasks are drawn: ``uniform`` (seeded epoch-wise permutations) or
    ``frontier`` (weight max(p(1−p), frontier_floor) from each task's recent success rate p;
    tasks never tried first) — ``agentgrpo.train.task_sampler``."""
    frontier_floor: float = 0.05
    """Smallest frontier weight (a task always solved or always failed; 1/4 is the largest),
    so saturated tasks are still revisited now and then."""
    frontier_ema: float = 0.5
    """Weight of the newest group in a task's success-rate EMA (1 = only the latest group)."""
    frontier_by: Literal["task", "family"] = "task"
    """Whose success rate a frontier weight reads: the task's own, or its family's (every group of
    a family updates one EMA, so a task never tried weighs what its family's groups showed)."""
    write_task_share: float | None = None
    """Stratify every round's draw: ``round(share × tasks_per_step)`` of its tasks are write tasks
    (a gold action calls one of the domain's write tools), the rest are not, each drawn by
    ``task_sampler`` within its stratum. None draws from the whole pool (the pool's own mix)."""
    demo_coef: float = 0.0
    """Weight of a demonstration term in every update: ``demo_coef`` × the token-mean NLL of
    ``demo_batch_size`` oracle demonstrations of the training tasks (as SFT saw them), added to the
    GRPO loss — an anchor on the correct actions themselves, where the KL term anchors only the
    tokens the policy sampled (InstructGPT's pretraining mix, with the SFT data). 0 = off.
    The demonstrations are the oracle's under ``env.oracle_arithmetic``, which must be the one the
    SFT learnt from (recorded in its ``agentgrpo.json``; another is refused)."""
    demo_batch_size: int = 4
    """Demonstrations per update (drawn without replacement, seeded by the step and the update)."""
    demo_tasks: Literal["all", "write"] = "all"
    """Whose demonstrations the term replays: every training task's, or only the write tasks'
    (a gold action calls a write tool: the turns GRPO displaces first)."""
    demo_splits: list[str] | None = None
    """The splits whose training tasks' demonstrations are replayed. None: the splits the SFT
    demonstrated (its ``data.splits``, recorded in the checkpoint's ``agentgrpo.json``;
    ``covered_seen``, SFT's default, for a checkpoint that records none), so the term anchors
    what SFT taught and adds no demonstration of a family SFT left uncovered."""
    success_coef: float = 0.0
    """Weight of a self-imitation term in every update: ``success_coef`` × the token-mean NLL, on the
    tokens the policy sampled, of ``success_batch_size`` of its own successful write episodes from
    earlier steps (outcome 1 and a write executed; the latest ``success_buffer`` are kept, in the
    checkpoint). The demonstration term's anchor on correct writes, from the policy's own finds. 0 = off."""
    success_batch_size: int = 4
    """Own successful episodes per update (drawn without replacement, seeded by the step and the update)."""
    success_buffer: int = 64
    """How many of the latest successful write episodes the self-imitation term draws from."""
    preserve_writes: Literal["off", "project", "hinge"] = "off"
    """Keep every update from lowering the likelihood of a preserve set of correct writes: the policy's
    latest ``success_buffer`` successful write episodes (outcome 1 and a write executed; this step's
    included; in the checkpoint), ``success_batch_size`` of them drawn per update as the self-imitation
    term draws. Against the no-write groups' gradient lowering the first write call
    (``benchmarks/write_interference.py``). ``project``: where the optimizer's move Δθ has
    ⟨Δθ, ∇ℓ⟩ < 0 (ℓ: the set's token-mean log-likelihood) it becomes Δθ − (⟨Δθ, ∇ℓ⟩ / ‖∇ℓ‖²) ∇ℓ, the
    nearest move that leaves ℓ unchanged to first order (PCGrad's projection, on the optimizer's move,
    since Adam does not move along the gradient). ``hinge``: LLDS on the set, anchored at each
    episode's log-probs when it was kept, ``preserve_coef`` × Σ max(0, anchor − log p) over the tokens
    of its actions whose likelihood fell (``algo.llds_gate``), aggregated as the policy loss
    (``algo.loss_agg``): no token of a kept correct write may fall below where it was, whatever other
    tokens gain. Either costs one forward and backward of the set per update."""
    preserve_coef: float = 1.0
    """Weight of ``preserve_writes=hinge``'s term (an episode's fallen tokens weigh as a policy-gradient
    episode's with advantage ``preserve_coef``)."""
    task_splits: list[str] = field(default_factory=lambda: ["covered_seen", "uncovered_seen"])
    """Splits whose tasks are trained on (the seed trains on covered_seen + uncovered_seen)."""
    val_every: int = 0
    """Validate every N steps (0 = never during training): pass^1 on the validation split
    (``env.splits.validation``: training families, never trained on), logged as ``val/pass1``
    to choose the checkpoint; the test split is left to ``agentgrpo eval``."""
    val_tasks: int = 8
    """How many tasks of the validation split each validation runs (all of them when fewer)."""
    val_heldout: bool = False
    """Validate on ``val_tasks`` fresh tasks of held-out validation worlds (the training families,
    worlds no job trains or tests on) instead of the training world's validation split: the
    learning curve of a policy that must read worlds it has not seen."""
    val_temperature: float = 0.0
    """Sampling temperature for validation (0 = greedy)."""
    save_every: int = 4
    """Checkpoint every N steps (0 = only at the end)."""
    keep_last: int = 2
    """Checkpoints kept on disk (older ones are deleted; 0 keeps every one)."""
    lld_diagnostic: bool = True
    """After each step's updates, measure the LLD rate with one extra forward pass."""
    old_logprobs: Literal["recompute", "rollout"] = "recompute"
    """Behaviour log-probs: recomputed by the training forward (exact: LLDS is 0 on the first
    update), or the sampler's own ("bypass mode", one forward pass cheaper per step)."""
    compile: bool = False
    """torch.compile the decoder for the training forward passes (a one-off compile of ~1 minute)."""
    shared_rollouts_dir: str | None = None
    """A directory where runs that sample alike share the rollouts of their policy's first
    update (an ablation's variants of one seed: ``agentgrpo ablate`` sets it), the same bits
    as sampling them again (``agentgrpo.train.shared_rollouts``). Only with the scripted user;
    None samples every rollout."""

    def __post_init__(self) -> None:
        for key in ("steps", "tasks_per_step", "group_size", "ppo_epochs"):
            require(getattr(self, key) >= 1, f"trainer.{key}", getattr(self, key), "must be >= 1")
        batch = self.tasks_per_step * self.group_size
        if self.mini_batch_size < 1 or batch % self.mini_batch_size:
            raise ValueError(
                f"trainer.mini_batch_size ({self.mini_batch_size}) must divide tasks_per_step × group_size ({batch})"
            )
        if self.micro_batch_size < 1 or self.mini_batch_size % self.micro_batch_size:
            raise ValueError(
                f"trainer.micro_batch_size ({self.micro_batch_size}) must divide "
                f"mini_batch_size ({self.mini_batch_size})"
            )
        self.betas = tuple(self.betas)  # type: ignore[assignment]
        require(self.lr >= 0, "trainer.lr", self.lr, "must be >= 0 (0 = a frozen-policy control run)")
        require(self.weight_decay >= 0, "trainer.weight_decay", self.weight_decay, "must be >= 0")
        for i, beta in enumerate(self.betas):
            require(0 <= beta < 1, f"trainer.betas[{i}]", beta, "must be in [0, 1)")
        require(self.max_grad_norm > 0, "trainer.max_grad_norm", self.max_grad_norm, "must be > 0")
        for key in ("warmup_steps", "val_every", "save_every", "keep_last"):
            require(getattr(self, key) >= 0, f"trainer.{key}", getattr(self, key),
                    "must be >= 0" + (" (0 keeps every checkpoint)" if key == "keep_last" else ""))
        require(self.val_tasks >= 1, "trainer.val_tasks", self.val_tasks, "must be >= 1")
        require(self.max_generation_rounds >= 1, "trainer.max_generation_rounds", self.max_generation_rounds,
                "must be >= 1 (the first round included)")
        require(not self.dynamic_sampling or self.group_size >= 2, "trainer.group_size", self.group_size,
                "must be >= 2 with trainer.dynamic_sampling=true (a group of one never has differing rewards)")
        require(0 <= self.frontier_floor <= 0.25, "trainer.frontier_floor", self.frontier_floor,
                "must be in [0, 0.25] (p(1-p) is at most 0.25)")
        require(0 < self.frontier_ema <= 1, "trainer.frontier_ema", self.frontier_ema, "must be in (0, 1]")
        require(self.write_task_share is None or 0 <= self.write_task_share <= 1, "trainer.write_task_share",
                self.write_task_share, "must be null or in [0, 1]")
        require(self.demo_coef >= 0, "trainer.demo_coef", self.demo_coef, "must be >= 0 (0 = off)")
        require(self.demo_batch_size >= 1, "trainer.demo_batch_size", self.demo_batch_size, "must be >= 1")
        require(self.success_coef >= 0, "trainer.success_coef", self.success_coef, "must be >= 0 (0 = off)")
        require(self.success_batch_size >= 1, "trainer.success_batch_size", self.success_batch_size, "must be >= 1")
        require(self.success_buffer >= 1, "trainer.success_buffer", self.success_buffer, "must be >= 1")
        require(self.preserve_coef >= 0, "trainer.preserve_coef", self.preserve_coef, "must be >= 0")
        require(self.demo_splits is None or (bool(self.demo_splits) and set(self.demo_splits) <= set(SPLIT_NAMES)),
                "trainer.demo_splits", self.demo_splits, f"must be null or a non-empty list of {list(SPLIT_NAMES)}")
        require(self.val_temperature >= 0, "trainer.val_temperature", self.val_temperature, "must be >= 0")
        unknown = [s for s in self.task_splits if s not in SPLIT_NAMES]
        require(bool(self.task_splits) and not unknown, "trainer.task_splits", self.task_splits,
                f"must be a non-empty list of {list(SPLIT_NAMES)}")


@dataclass
class LoggingConfig(TrackingConfig):
    """Trackers and project as in sft and eval (``TrackingConfig``), and the progress bar."""

    progress: bool = True
    """Show a progress bar with the key numbers."""


@dataclass
class GRPOConfig:
    experiment: str = "vanilla"
    """Name of the experiment (set by ``experiment=NAME``; informational)."""
    seed: int = 0
    run_dir: str = "runs/grpo"
    env: EnvConfig = field(default_factory=EnvConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: ObjectiveSettings = field(default_factory=ObjectiveSettings)
    reward: RewardConfig = field(default_factory=RewardConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    def __post_init__(self) -> None:
        if isinstance(self.policy, str):  # GRPOConfig(policy="DIR") from Python, like policy=DIR on the command line
            self.policy = PolicyConfig(init=self.policy)
        t = self.trainer
        total = t.tasks_per_step * t.group_size
        try:
            self.algo.check(updates=self.updates_per_rollout, key_format="algo.{}",
                            more_updates=f"set trainer.mini_batch_size to a proper divisor of {total} (now "
                            f"{t.mini_batch_size}) or trainer.ppo_epochs >= 2 (now {t.ppo_epochs})")
        except ValueError as error:
            raise ConfigError(str(error)) from None
        if t.val_every and not t.val_heldout and not self.env.splits.validation:
            raise ConfigError(
                f"trainer.val_every={t.val_every} needs validation tasks but env.splits.validation="
                f"{self.env.splits.validation}: set env.splits.validation (on τ-bench it holds tasks out of "
                "env.splits.uncovered_seen), trainer.val_heldout=true, or trainer.val_every=0")
        if self.algo.llds_coef > 0 and t.old_logprobs == "rollout":
            raise ConfigError(
                f"algo.llds_coef={self.algo.llds_coef} with trainer.old_logprobs=rollout: the sampler's log-probs "
                "come from another numeric path, so LLDS would penalise that mismatch (never 0 on unchanged "
                "weights); set trainer.old_logprobs=recompute (or algo.llds_coef=0)")

    @property
    def updates_per_rollout(self) -> int:
        """Optimizer steps per rollout batch: PPO epochs × mini-batches."""
        t = self.trainer
        return updates_per_rollout(t.tasks_per_step * t.group_size, t.mini_batch_size, t.ppo_epochs)

    @property
    def llds_active(self) -> bool:
        """LLDS is identically 0 unless the policy moves between old log-probs and an update."""
        return self.algo.llds_acts(self.updates_per_rollout)
