"""The settings of ``agentgrpo sft`` (the schema of ``configs/sft.yaml``): the model, the
environment its teacher plays, the demonstrations and the optimisation."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from agentgrpo.config import require
from agentgrpo.envs.config import EnvConfig
from agentgrpo.envs.registry import SPLIT_NAMES
from agentgrpo.policy.settings import SFTPolicyConfig
from agentgrpo.rollout.config import RolloutConfig
from agentgrpo.tracking import TrackingConfig
from agentgrpo.train.recovery import RECOVERY_FAULTS, TOOL_FAULTS

RFT_SEED_OFFSET = 500
"""``data.rft_policy``'s episodes take user seeds from ``seed * 1000 + RFT_SEED_OFFSET`` on, past the
oracle's (``seed * 1000 + k``), so the policy and the oracle never meet the same scripted user on a task."""
MAX_RFT_ROUNDS = 5
"""``data.rft_rounds``' bound: each round is a whole SFT."""


@dataclass
class SFTDataConfig:
    splits: list[str] = field(default_factory=lambda: ["covered_seen"])
    """Splits whose tasks get teacher demonstrations (the seed: covered_seen)."""
    demos_per_task: int = 8
    """Oracle episodes per task, each with a differently seeded scripted user."""
    max_length: int = 6144
    """Longest training sequence in tokens (longer transcripts are cut from the end)."""
    tokenizer_split: Literal["word", "id"] = "word"
    """A built preset's tokenizer: ``word`` (letters, digits and underscores form one word: the
    training world's ids become single tokens, the quickstart's published numbers) or ``id``
    (every world's ids the same tokens, ids taken out of the corpus: for training on many
    worlds and evaluating on held-out ones; ``agentgrpo.policy.tokenizer.ID_SPLIT_PATTERN``)."""
    copy_check_tasks: int = 16
    """Held-out validation-world tasks whose oracle demonstrations the copy check reads each
    epoch (teacher-forced accuracy on the ids the policy must copy from its context); 0 = off.
    Needs a domain with held-out worlds (generated airline worlds; skipped, with the reason in
    sft_stats.json, elsewhere)."""
    copy_check_every: int = 0
    """Also run the copy check every this many optimizer steps (0: only at each epoch's end)."""
    relabel_ids: bool = False
    """Give every copied id a fresh random value of the same shape on every pass over a
    demonstration (``agentgrpo.train.id_relabel``), so SFT cannot lower its loss by memorising
    its worlds' ids and must read them from the context."""
    permute_slots: bool = False
    """With ``env.delexicalise``: renumber each kind's slots at random on every pass over a
    demonstration (``agentgrpo.envs.delex.renumber_slots``), so no slot is likelier than another
    (in order of first appearance the first reservation is always ``<R1>``) and the policy must
    copy the one its context names."""
    opening_splits: list[str] = field(default_factory=list)
    """Also teach the opening of every task of these splits (of every training world): the oracle's
    conversation up to and including its first message to the user after its first tool result
    (``agentgrpo.envs.transcript.first_reply_index``; in the airline, reading the profile and asking
    what the request needs), one per task, beside the whole demonstrations of ``splits``. How a
    request is read is a few tokens of each demonstration; openings add examples of exactly that,
    for families whose rest is not demonstrated too, and teach nothing after it (no write, no
    refusal). Empty: none."""
    opening_repeats: int = 0
    """Also teach each demonstration's own opening (cut as for ``opening_splits``) this many times
    per epoch, as separate examples beside the whole demonstration. The request is read in a few
    of a demonstration's tokens; the tiny preset does not learn to read it in three epochs of whole
    transcripts, and an opening is about half a transcript's length. 0: none."""
    opening_reads: int = 1
    """Where ``opening_splits`` and ``opening_repeats`` cut an opening: after the first message to
    the user after this many tool results (``first_reply_index``). 1: the profile read and the
    question after it. 2: also the next read (in the airline the reservation the request is about)
    and what the agent makes of it, the turn where a change, a cancellation or a refusal is
    proposed. A demonstration with no reply after so many is cut after the deepest one it has."""

    recovery_share: float = 0.0
    """The share of the demonstrations played again as recovery demonstrations
    (``agentgrpo.train.recovery``): one of the oracle's write calls (any call in an episode without
    one) is first made wrong (misnamed, missing arguments, or malformed), the environment rejects
    it, and the oracle's own call follows; the wrong turn is context only, not trained. In [0, 1];
    0: none."""
    recovery_faults: list[str] = field(default_factory=lambda: list(TOOL_FAULTS))
    """The faults recovery demonstrations are drawn from, uniformly (``RECOVERY_FAULTS``): a call
    ``misnamed``, ``incomplete`` or ``malformed``, the message before the write ``declined`` (one
    number in it changed, so the user says no and restates the request), or ``policy``: the first
    slip of the policy ``data.recovery_policy``, shown the demonstration (DAgger-style)."""
    recovery_policy: str | None = None
    """The checkpoint (a trained policy, e.g. an earlier SFT's ``final``) whose first slips the
    ``policy`` fault plays: at each turn of a demonstration it decodes its own turn greedily, and the
    first call that is not the oracle's (or a malformed turn) is played, then the oracle's. It must
    see ids as this SFT's demonstrations show them (``env.delexicalise``, ``env.delexicalise_places``).
    Needed by, and only by, the ``policy`` fault."""

    rft_policy: str | None = None
    """Rejection-sampling fine-tuning (``agentgrpo.train.rft``): a trained policy (an earlier SFT's
    ``final``, reading the view these demonstrations are in) that plays every demonstration task
    ``rft_samples`` times; its distinct successful episodes join the oracle's demonstrations.
    None: off."""
    rft_samples: int = 4
    """Episodes the ``rft_policy`` plays per task, each with its own scripted-user seed."""
    rft_rollout: RolloutConfig = field(default_factory=lambda: RolloutConfig(
        max_turns=20, max_new_tokens=320, temperature=0.7, max_batch=64))
    """How the ``rft_policy`` samples: evaluation's limits, at the quickstart GRPO's rollout temperature (0.7)."""
    rft_rounds: int = 0
    """Rounds of rejection sampling in one run (expert iteration): each round an SFT on the oracle's
    demonstrations and the successes of the round before's policy, the last at ``run_dir``, the earlier
    ones under ``run_dir/rft_rounds/round<k>``. The first round's player is ``rft_policy`` when set,
    else a plain SFT of this config trained there first (round0). 0: off (``rft_policy`` alone is one
    round with that player)."""

    def __post_init__(self) -> None:
        require(bool(self.recovery_faults) and set(self.recovery_faults) <= set(RECOVERY_FAULTS),
                "data.recovery_faults", self.recovery_faults, f"must be a non-empty list of {list(RECOVERY_FAULTS)}")
        require(0.0 <= self.recovery_share <= 1.0, "data.recovery_share", self.recovery_share, "must be in [0, 1]")
        require(("policy" in self.recovery_faults) == (self.recovery_policy is not None), "data.recovery_policy",
                self.recovery_policy, "must name a checkpoint exactly when data.recovery_faults holds policy")
        require(1 <= self.rft_samples <= RFT_SEED_OFFSET, "data.rft_samples", self.rft_samples,
                f"must be in [1, {RFT_SEED_OFFSET}] (episodes per task)")
        require(0 <= self.rft_rounds <= MAX_RFT_ROUNDS, "data.rft_rounds", self.rft_rounds,
                f"must be in [0, {MAX_RFT_ROUNDS}]")
        require(self.opening_repeats >= 0, "data.opening_repeats", self.opening_repeats, "must be >= 0")
        require(self.opening_reads >= 1, "data.opening_reads", self.opening_reads, "must be >= 1 (tool results)")
        unknown_openings = [s for s in self.opening_splits if s not in SPLIT_NAMES]
        require(not unknown_openings, "data.opening_splits", self.opening_splits,
                f"must be a list of {list(SPLIT_NAMES)}")
        unknown = [s for s in self.splits if s not in SPLIT_NAMES]
        require(bool(self.splits) and not unknown, "data.splits", self.splits,
                f"must be a non-empty list of {list(SPLIT_NAMES)}")
        require(self.demos_per_task >= 1, "data.demos_per_task", self.demos_per_task, "must be >= 1")
        require(self.max_length >= 1, "data.max_length", self.max_length, "must be >= 1 (tokens)")
        require(self.tokenizer_split in ("word", "id"), "data.tokenizer_split", self.tokenizer_split,
                "must be word or id")
        require(self.copy_check_tasks >= 0, "data.copy_check_tasks", self.copy_check_tasks, "must be >= 0")
        require(self.copy_check_every >= 0, "data.copy_check_every", self.copy_check_every, "must be >= 0")


@dataclass
class SFTTrainerConfig:
    epochs: int = 12
    batch_size: int = 16
    """Sequences per optimizer step."""
    micro_batch_size: int = 8
    """Sequences per forward/backward."""
    lr: float = 3e-3
    """Peak AdamW learning rate of the cosine schedule."""
    min_lr_ratio: float = 0.05
    """The schedule's final learning rate as a share of ``lr``, in [0, 1]."""
    warmup_ratio: float = 0.05
    """Share of the optimizer steps spent warming up linearly, in [0, 1]."""
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    """Gradients are clipped to this global norm (> 0)."""
    compile: bool = False
    """torch.compile the decoder (a one-off compile of ~1 minute; pays off for long runs and larger models)."""
    copy_weight: float = 1.0
    """Loss weight of the tokens of every value an assistant call copies from its context (ids,
    slots, dates: ``agentgrpo.train.copy_check.copied_values``); every other labelled token
    weighs 1. The loss is the weighted mean, so this shifts the gradient toward reading values
    from the context without changing its scale."""
    tool_name_weight: float = 1.0
    """Loss weight of the tokens of every assistant call's tool name: the call's first decision,
    a token or two among the dozens of its arguments, where an SFT policy writes a frequent name
    over the arguments of the call it means (``eval --writes``' misnamed calls). A weighted mean,
    like ``copy_weight``."""
    first_reply_weight: float = 1.0
    """Loss weight of the tokens of each demonstration's first message to the user after its first
    tool result (``agentgrpo.envs.transcript.first_reply_index``: in the airline, what the request
    needs once the profile is read), the one turn that shows the request was read; every other
    labelled token weighs as before. A weighted mean, like ``copy_weight``."""
    opening_weight: float = 1.0
    """Loss weight of the tokens of every assistant message of each demonstration's opening, up to
    and including its first reply after a tool result (in the airline: the profile read, its reason,
    which restates the request under ``env.oracle_goal``, and the question after it): the share of
    the gradient ``data.opening_repeats`` gives those turns, at no extra step (measured not to do
    what the repeats do: docs/results/write-levers.md §18). A weighted mean, like ``copy_weight``;
    ``first_reply_weight``, when set, weighs the first reply itself."""
    copy_warmup_steps: int = 0
    """Optimizer steps of a copy warm-up before SFT, on the task ``copy_warmup_task`` names. A
    model built from a config has no in-context copying circuit, which a pretrained LM gets from
    pretraining; without one it writes ids of the right shape that are not the ones in its context."""
    copy_warmup_task: Literal["segment", "slot"] = "segment"
    """The copy warm-up's (and ``copy_mix_weight``'s) task. ``segment``
    (``agentgrpo.train.copy_check.copy_warmup_batch``): a random segment of id tokens hidden among
    random id tokens, then the segment again; loss on the repeat after its first token (the
    multi-token copy an id split into pieces needs). ``slot`` (``slot_recall_batch``, needs
    ``env.delexicalise=true``): slots of random kinds and numbers mentioned among random tokens of
    the demonstrations, and queries made of the demonstrations' own text before an id argument
    (``{"reservation_id": "``), each answered by the latest slot of its kind: the choice of which
    ``<R…>`` a call copies."""
    copy_warmup_queries: int = 8
    """Queries per row of the ``slot`` task (each one labelled token)."""
    copy_warmup_length: int = 8
    """Tokens in each random segment of the copy warm-up (an id is 6-14 tokens with the id split)."""
    copy_warmup_context: int = 120
    """Random tokens the segment hides in, at a random place (0: the segment follows itself at a
    fixed distance, which a positional head solves without learning to copy by content); for the
    ``slot`` task, the random tokens of a row between its mentions and queries (>= 12)."""
    copy_warmup_batch_size: int = 32
    """Sequences per copy warm-up step."""
    copy_mix_weight: float = 0.0
    """> 0: every SFT step also takes this weight times the copy warm-up's loss on a fresh random
    batch, so SFT keeps the copy circuit the warm-up built."""
    save_every: int = 50
    """Checkpoint every N optimizer steps (``checkpoints/step_000050/`` and on, from which ``agentgrpo sft
    --resume`` continues a killed run); 0 = none. The last step's weights are ``final/``."""
    keep_last: int = 2
    """Checkpoints kept on disk (older ones are deleted; 0 keeps every one)."""

    def __post_init__(self) -> None:
        require(self.epochs >= 1, "trainer.epochs", self.epochs, "must be >= 1")
        require(self.batch_size >= 1, "trainer.batch_size", self.batch_size, "must be >= 1")
        require(self.micro_batch_size >= 1 and self.batch_size % self.micro_batch_size == 0,
                "trainer.micro_batch_size", self.micro_batch_size,
                f"must divide trainer.batch_size ({self.batch_size})")
        require(self.lr >= 0, "trainer.lr", self.lr, "must be >= 0")
        for key in ("min_lr_ratio", "warmup_ratio"):
            require(0 <= getattr(self, key) <= 1, f"trainer.{key}", getattr(self, key), "must be in [0, 1]")
        require(self.weight_decay >= 0, "trainer.weight_decay", self.weight_decay, "must be >= 0")
        require(self.max_grad_norm > 0, "trainer.max_grad_norm", self.max_grad_norm, "must be > 0")
        require(self.copy_weight > 0, "trainer.copy_weight", self.copy_weight, "must be > 0")
        require(self.tool_name_weight > 0, "trainer.tool_name_weight", self.tool_name_weight, "must be > 0")
        require(self.first_reply_weight > 0, "trainer.first_reply_weight", self.first_reply_weight, "must be > 0")
        require(self.opening_weight > 0, "trainer.opening_weight", self.opening_weight, "must be > 0")
        if self.copy_warmup_task == "slot":
            require(self.copy_warmup_context >= 12, "trainer.copy_warmup_context", self.copy_warmup_context,
                    "must be >= 12 for trainer.copy_warmup_task=slot (one mention in twelve tokens)")
        else:
            require(self.copy_warmup_context == 0 or self.copy_warmup_context >= self.copy_warmup_length,
                    "trainer.copy_warmup_context", self.copy_warmup_context,
                    "must be 0 or hold the segment (>= trainer.copy_warmup_length)")
        for key in ("copy_warmup_length", "copy_warmup_batch_size", "copy_warmup_queries"):
            require(getattr(self, key) >= 1, f"trainer.{key}", getattr(self, key), "must be >= 1")
        require(self.copy_warmup_steps >= 0, "trainer.copy_warmup_steps", self.copy_warmup_steps, "must be >= 0")
        require(self.copy_mix_weight >= 0, "trainer.copy_mix_weight", self.copy_mix_weight, "must be >= 0")
        for key in ("save_every", "keep_last"):
            require(getattr(self, key) >= 0, f"trainer.{key}", getattr(self, key),
                    "must be >= 0" + (" (0 keeps every checkpoint)" if key == "keep_last" else ""))


@dataclass
class SFTConfig:
    seed: int = 0
    run_dir: str = "runs/sft"
    policy: SFTPolicyConfig = field(default_factory=SFTPolicyConfig)
    """The model (``policy=tiny`` is short for ``policy.init=tiny``: a built preset, a checkpoint
    directory, a Hub id, a .gguf file), its device, precision, gradient checkpointing and LoRA."""
    prompt_style: Literal["full", "compact"] | None = None
    """System prompt: full (policy + JSON schemas) or compact; None = compact for built presets,
    the checkpoint's own for a checkpoint (its agentgrpo.json; full without one)."""
    env: EnvConfig = field(default_factory=EnvConfig)
    data: SFTDataConfig = field(default_factory=SFTDataConfig)
    trainer: SFTTrainerConfig = field(default_factory=SFTTrainerConfig)
    logging: TrackingConfig = field(default_factory=TrackingConfig)
    """Metric backends besides JSONL (``logging.trackers=[tensorboard,wandb]``) and their project, as in train."""
    progress: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.policy, str):  # SFTConfig(policy="tiny") from Python, like policy=tiny on the command line
            self.policy = SFTPolicyConfig(init=self.policy)
