"""Settings of the GRPO trainer: the schema of ``configs/grpo.yaml`` and its experiments.

Each experiment of DESIGN.md §1 is a handful of values here (``configs/experiment/*.yaml``):
the advantage estimator (``algo.adv_estimator``), the PRM-Lite coefficient
(``reward.process_coef``) and the LLDS weight (``algo.llds_coef``). The trainer reads
them and never branches on the experiment's name.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from agentgrpo.envs.airline.factory import EnvConfig
from agentgrpo.rollout.engine import RolloutConfig

LossAgg = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm", "token-sum"]


@dataclass
class PolicyConfig:
    init: str = "runs/sft/final"
    """Where the policy starts: a checkpoint directory (an SFT run's ``final``) or a preset name."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Parameter dtype for training (float32 on CPU; bfloat16 on GPUs)."""


@dataclass
class AlgoConfig:
    adv_estimator: str = "grpo"
    """Registered advantage estimator: grpo (A/L), lata (A/√L), turn_discount, turn_discount_lata, dr_grpo."""
    norm_by_std: bool = True
    """Divide group-centred rewards by the group std (GRPO); False = Dr. GRPO."""
    adv_std_eps: float = 1e-6
    """ε in A = (R − mean) / (std + ε). Raising it (e.g. 0.1) keeps groups whose rewards
    differ only by the process score (all episodes succeed, or all fail) from being scaled
    up to unit advantages, so PRM-Lite acts as a tie-breaker (docs/results/grpo-tuning.md)."""
    turn_discount_alpha: float | None = None
    """α of Turn-Discount weights α^(L−1−k); None uses the estimator's default (1.05 where it applies)."""
    turn_credit_coef: float = 0.0
    """β of per-turn PRM credit (DESIGN §3.4, prm_credit: turn); 0 disables it."""
    clip_low: float = 0.2
    """PPO clip ε below 1."""
    clip_high: float = 0.2
    """PPO clip ε above 1 (DAPO's clip-higher when larger than clip_low)."""
    loss_agg: LossAgg = "seq-mean-token-sum"
    """How the per-token loss becomes a scalar (veRL's loss_agg_mode meanings)."""
    importance: Literal["token", "sequence"] = "token"
    """Token-level PPO ratio, or GSPO's sequence-level ratio."""
    kl_coef: float = 0.01
    """β_kl of the KL-to-reference loss term; 0 skips the reference model."""
    kl_kind: Literal["k1", "k2", "k3", "abs"] = "k3"
    """KL estimator (k3 = veRL's low_var_kl)."""
    llds_coef: float = 0.0
    """λ of the LLDS likelihood-preserving regulariser (0.2 in the LLD paper)."""
    llds_gate: Literal["action", "token", "response"] = "action"
    """LLDS gate granularity."""
    entropy_coef: float = 0.0
    """Entropy bonus coefficient (0 = only logged)."""

    def __post_init__(self) -> None:
        if self.clip_low <= 0 or self.clip_high <= 0:
            raise ValueError("algo.clip_low and algo.clip_high must be > 0")
        if self.kl_coef < 0 or self.llds_coef < 0:
            raise ValueError("algo.kl_coef and algo.llds_coef must be >= 0")
        if self.adv_std_eps <= 0:
            raise ValueError(f"algo.adv_std_eps must be > 0, got {self.adv_std_eps}")


@dataclass
class RewardConfig:
    process_coef: float = 0.0
    """Reward = outcome + process_coef · PRM-Lite process score (0.3 in the seed study)."""
    prm_weights: str | None = None
    """A PRM-Lite YAML to use instead of the packaged weights."""


@dataclass
class TrainerConfig:
    steps: int = 24
    """GRPO steps (one rollout batch each)."""
    tasks_per_step: int = 4
    """Tasks sampled per step (the seed: 4)."""
    group_size: int = 8
    """Trajectories per task: the GRPO group G (the seed: 8)."""
    ppo_epochs: int = 1
    """Passes over each rollout batch."""
    mini_batch_size: int = 16
    """Trajectories per optimizer step; several mini-batches per rollout make LLDS active."""
    micro_batch_size: int = 8
    """Trajectories per forward/backward (gradient accumulation inside a mini-batch)."""
    lr: float = 5e-5
    """AdamW learning rate (the seed used 5e-6 for 7B; tiny models need more)."""
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    warmup_steps: int = 0
    """Linear warm-up, in optimizer steps."""
    lr_schedule: Literal["constant", "cosine"] = "constant"
    max_grad_norm: float = 1.0
    task_splits: list[str] = field(default_factory=lambda: ["covered_seen", "uncovered_seen"])
    """Splits whose tasks are trained on (the seed trains on covered_seen + uncovered_seen)."""
    val_every: int = 0
    """Validate every N steps (0 = never during training)."""
    val_tasks: int = 8
    """How many training tasks the validation pass^1 runs on."""
    val_temperature: float = 0.0
    """Sampling temperature for validation (0 = greedy)."""
    save_every: int = 0
    """Checkpoint every N steps (0 = only at the end)."""
    keep_last: int = 2
    """Checkpoints kept on disk (older ones are deleted)."""
    lld_diagnostic: bool = True
    """After each step's updates, measure the LLD rate with one extra forward pass."""
    old_logprobs: Literal["recompute", "rollout"] = "recompute"
    """Behaviour log-probs: recomputed by the training forward (exact: LLDS is 0 on the first
    update), or the sampler's own ("bypass mode", one forward pass cheaper per step)."""
    compile: bool = False
    """torch.compile the decoder for the training forward passes (a one-off compile of ~1 minute)."""

    def __post_init__(self) -> None:
        batch = self.tasks_per_step * self.group_size
        if min(self.steps, self.tasks_per_step, self.group_size, self.ppo_epochs) < 1:
            raise ValueError("trainer.steps, tasks_per_step, group_size and ppo_epochs must be >= 1")
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


@dataclass
class LoggingConfig:
    trackers: list[str] = field(default_factory=list)
    """Extra metric backends besides JSONL: tensorboard, wandb, swanlab (offline-safe)."""
    project: str = "agentgrpo"
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
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    @property
    def llds_active(self) -> bool:
        """LLDS is identically 0 unless the policy moves between old log-probs and an update."""
        updates_per_rollout = self.trainer.ppo_epochs * (
            self.trainer.tasks_per_step * self.trainer.group_size // self.trainer.mini_batch_size
        )
        return self.algo.llds_coef > 0 and updates_per_rollout > 1
