"""SFT warm-up on teacher transcripts, with Render-Twice-Diff loss masking.

The teacher is the oracle agent talking to the scripted user on the covered_seen tasks
(several episodes per task, each with a differently seeded user, so the policy sees
varied phrasing), in every training world (``env.train_worlds``: many worlds teach the
policy to read ids from its context instead of memorising one world's). A copy check
(``agentgrpo.train.copy_check``) on held-out validation worlds is logged each epoch.
Each transcript is rendered through the policy's chat template and
only the assistant turns are labelled (``agentgrpo.agent.masking``). The loss is the
mean negative log-likelihood over all labelled tokens of an optimizer batch, however
it is split into micro-batches. Every sequence starts with the same system prompt, so
the forward pass computes it once per micro-batch (``agentgrpo.policy.forward``).
"""
from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from agentgrpo.agent.chat import ChatFormat
from agentgrpo.agent.format import openai_assistant_text
from agentgrpo.agent.masking import IGNORE_INDEX, SFTExample, build_sft_example, build_sft_examples
from agentgrpo.chat_content import content_text
from agentgrpo.config import ConfigError, require, to_dict, to_yaml
from agentgrpo.envs.config import EnvConfig
from agentgrpo.envs.delex import delexicalise_messages, slot_tokens
from agentgrpo.envs.episode import run_episode
from agentgrpo.envs.registry import (
    SPLIT_NAMES,
    VALIDATION_SPLIT,
    EnvBundle,
    build_env,
    build_heldout,
    build_training_worlds,
    domain_oracle,
    id_kinds,
    make_env,
)
from agentgrpo.openai_client import llm_user_client
from agentgrpo.policy.device import model_device
from agentgrpo.policy.forward import PolicyForward
from agentgrpo.policy.hf import (
    build_policy,
    load_for_training,
    prepare_for_training,
    read_agent_config,
    resolve_delexicalise,
    save_policy,
)
from agentgrpo.policy.lora import trainable_share
from agentgrpo.policy.presets import PRESETS
from agentgrpo.policy.settings import SFTPolicyConfig
from agentgrpo.policy.tokenizer import domain_corpus
from agentgrpo.progress import progress_bar
from agentgrpo.tracking import TrackingConfig, make_tracker
from agentgrpo.train.copy_check import (
    CopyProbe,
    copied_values,
    copy_accuracy,
    copy_warmup_batch,
    copy_warmup_loss,
    find_copy_spans,
)
from agentgrpo.train.id_relabel import relabel_ids
from agentgrpo.train.optim import make_optimizer, make_scheduler


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

    def __post_init__(self) -> None:
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
    copy_warmup_steps: int = 0
    """Optimizer steps of a copy warm-up before SFT (``agentgrpo.train.copy_check.copy_warmup_batch``:
    a random segment of id tokens hidden among random id tokens, then the segment again; loss on
    the repeat after its first token). A model built from
    a config has no in-context copying circuit, which a pretrained LM gets from pretraining;
    without one it writes ids of the right shape that are not the ones in its context."""
    copy_warmup_length: int = 8
    """Tokens in each random segment of the copy warm-up (an id is 6-14 tokens with the id split)."""
    copy_warmup_context: int = 120
    """Random tokens the segment hides in, at a random place (0: the segment follows itself at a
    fixed distance, which a positional head solves without learning to copy by content)."""
    copy_warmup_batch_size: int = 32
    """Sequences per copy warm-up step."""
    copy_mix_weight: float = 0.0
    """> 0: every SFT step also takes this weight times the copy warm-up's loss on a fresh random
    batch, so SFT keeps the copy circuit the warm-up built."""

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
        require(self.copy_warmup_context == 0 or self.copy_warmup_context >= self.copy_warmup_length,
                "trainer.copy_warmup_context", self.copy_warmup_context,
                "must be 0 or hold the segment (>= trainer.copy_warmup_length)")
        for key in ("copy_warmup_length", "copy_warmup_batch_size"):
            require(getattr(self, key) >= 1, f"trainer.{key}", getattr(self, key), "must be >= 1")
        require(self.copy_warmup_steps >= 0, "trainer.copy_warmup_steps", self.copy_warmup_steps, "must be >= 0")
        require(self.copy_mix_weight >= 0, "trainer.copy_mix_weight", self.copy_mix_weight, "must be >= 0")


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


@dataclass
class Demonstration:
    task_id: str
    user_seed: int
    reward: float
    messages: list[dict[str, Any]]


def collect_demonstrations(bundles: EnvBundle | list[EnvBundle], config: EnvConfig, splits: list[str],
                           per_task: int, seed: int) -> list[Demonstration]:
    """Oracle transcripts with the scripted user on the ``splits`` tasks of every world in
    ``bundles``; failed episodes are dropped. With ``config.delexicalise`` the transcripts are
    as a delexicalising policy sees them (ids as slots)."""
    demos = []
    user_client = llm_user_client(config.user)  # None for the scripted user (the default)
    kinds = id_kinds(config) if config.delexicalise else None
    for bundle in bundles if isinstance(bundles, list) else [bundles]:
        for task in bundle.tasks(splits):
            for k in range(per_task):
                user_seed = seed * 1000 + k
                # the oracle reads the real world; the transcript is then put in the policy's view
                env = make_env(bundle, task, config, user_seed=user_seed, user_client=user_client,
                               delexicalise=False)
                result = run_episode(env, domain_oracle(config, bundle, task))
                if result.reward == 1.0:
                    messages = delexicalise_messages(result.messages, kinds) if kinds else result.messages
                    demos.append(Demonstration(task.task_id, user_seed, result.reward, messages))
    return demos


def transcript_text(messages: list[dict[str, Any]]) -> str:
    """Plain text of a transcript as the policy sees it (tokenizer training corpus)."""
    return "\n".join(
        openai_assistant_text(m) if m["role"] == "assistant" else content_text(m.get("content"))
        for m in messages
        if m["role"] != "system"
    )


def resolve_prompt_style(config: SFTConfig) -> str:
    if config.prompt_style is not None:
        return config.prompt_style
    preset = PRESETS.get(config.policy.init)
    if preset is not None:
        return "compact" if preset.kind == "built" else "full"
    return read_agent_config(config.policy.init)["prompt_style"]  # the checkpoint's own (full if it says none)


def prepare_policy(config: SFTConfig, worlds: list[EnvBundle], demos: list[Demonstration],
                   agent_config: dict[str, Any]) -> tuple[Any, Any]:
    """Build a preset (tokenizer trained on the training worlds' text + teacher transcripts) or
    load a checkpoint; then place it and add LoRA / gradient checkpointing as ``config.policy`` says."""
    preset = PRESETS.get(config.policy.init)
    if preset is not None and preset.kind == "built":
        split = config.data.tokenizer_split
        corpus = domain_corpus([world.domain for world in worlds],
                               extra_texts=[transcript_text(d.messages) for d in demos],
                               strip_identifiers=split == "id")
        init_dir = Path(config.run_dir) / "init"
        slots = slot_tokens(id_kinds(config.env)) if config.env.delexicalise else ()
        model, tokenizer = build_policy(config.policy.init, corpus, init_dir, seed=config.seed,
                                        agent_config=agent_config, atomic_texts=slots, tokenizer_split=split)
        model = model.to(getattr(torch, config.policy.dtype))
        return prepare_for_training(model, config.policy, init_dir), tokenizer
    return load_for_training(config.policy)


def policy_view(chat: ChatFormat, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A recorded transcript as the policy sees it: our system prompt, then the chat messages."""
    rest = messages[1:] if messages and messages[0]["role"] == "system" else messages
    return [{"role": "system", "content": chat.system_prompt}, *chat.chat_messages(rest)]


def collate_examples(examples: list[SFTExample], pad_token_id: int) -> tuple[torch.Tensor, ...]:
    """(input_ids, attention_mask, label_mask), each (B, T), right-padded."""
    width = max(len(e.input_ids) for e in examples)
    input_ids = torch.full((len(examples), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros(len(examples), width, dtype=torch.long)
    label_mask = torch.zeros(len(examples), width, dtype=torch.float32)
    for row, example in enumerate(examples):
        n = len(example.input_ids)
        input_ids[row, :n] = torch.tensor(example.input_ids)
        attention_mask[row, :n] = 1
        label_mask[row, :n] = torch.tensor([float(label != IGNORE_INDEX) for label in example.labels])
    return input_ids, attention_mask, label_mask


def copy_probes(config: SFTConfig, bundle: EnvBundle, chat: ChatFormat) -> tuple[list[CopyProbe], str | None]:
    """The copy check's probes: one oracle demonstration of each of ``data.copy_check_tasks``
    validation tasks from held-out worlds (never a training or test world). Returns
    ``(probes, None)``, or ``([], reason)`` when the check is off or the domain cannot draw them."""
    if config.data.copy_check_tasks == 0:
        return [], "off (data.copy_check_tasks=0)"
    try:
        worlds = build_heldout(config.env, [VALIDATION_SPLIT], config.data.copy_check_tasks, training=bundle)
    except ConfigError as e:
        return [], f"unavailable: {e}"
    demos = collect_demonstrations(worlds, config.env, [VALIDATION_SPLIT], per_task=1, seed=config.seed + 1)
    probes = []
    for demo in demos:  # one example per demonstration: a rejected one must not shift the pairing
        example = build_sft_example(chat, policy_view(chat, demo.messages), max_length=config.data.max_length)
        if example is not None:
            spans = find_copy_spans(example, [chat.encode(v) for v in copied_values(demo.messages)])
            probes.append(CopyProbe(example.input_ids, spans))
    return probes, None


def relabelled_examples(chat: ChatFormat, demos: list[Demonstration], seed: int, epoch: int,
                        max_length: int) -> list[SFTExample]:
    """One epoch's examples with fresh ids (``data.relabel_ids``): the draw depends on ``seed``
    and ``epoch`` only, so a rerun trains on the same sequence of relabelled transcripts."""
    rng = random.Random(seed * 1_000_003 + epoch)
    return build_sft_examples(chat, [policy_view(chat, relabel_ids(d.messages, rng)) for d in demos],
                              max_length=max_length)[0]


def train_sft(config: SFTConfig, demonstrations: list[Demonstration] | None = None) -> Path:
    """Run SFT; returns the directory of the final checkpoint (``run_dir/final``).

    ``demonstrations``: transcripts to learn from instead of the oracle's on ``data.splits``
    (``agentgrpo sanity``'s format warm-up, whose toy-domain keys are random on purpose).
    """
    t_start = time.perf_counter()
    run_dir = Path(config.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(to_yaml(config))
    torch.manual_seed(config.seed)
    agent_config = {"prompt_style": resolve_prompt_style(config),
                    "delexicalise": resolve_delexicalise(config.env.delexicalise, config.policy.init)}
    config.env.delexicalise = agent_config["delexicalise"]
    bundle = build_env(config.env)
    worlds = build_training_worlds(config.env, training=bundle)
    demos = demonstrations if demonstrations is not None else collect_demonstrations(
        worlds, config.env, config.data.splits, config.data.demos_per_task, config.seed)
    if not demos:
        raise RuntimeError("the oracle produced no successful demonstrations for the SFT splits")
    model, tokenizer = prepare_policy(config, worlds, demos, agent_config)
    chat = ChatFormat(tokenizer, bundle.domain.tool_schemas(), bundle.domain.policy,
                      prompt_style=agent_config["prompt_style"])
    examples, rejected = build_sft_examples(
        chat, [policy_view(chat, d.messages) for d in demos], max_length=config.data.max_length
    )
    relabelled = None
    if config.data.relabel_ids:
        def relabelled(epoch: int) -> list[SFTExample]:
            return relabelled_examples(chat, demos, config.seed, epoch, config.data.max_length)
    probes, copy_skip = (([], "off (demonstrations given)") if demonstrations is not None
                         else copy_probes(config, bundle, chat))
    copy_task = _CopyTask(config, demos, chat, model_device(model)) if (
        config.trainer.copy_warmup_steps or config.trainer.copy_mix_weight) else None
    warmup = _copy_warmup(config, model, copy_task, probes) if config.trainer.copy_warmup_steps else None
    stats = _fit(config, model, examples, chat.pad_token_id, run_dir, probes, copy_task, relabelled)
    if warmup is not None:
        stats["copy_warmup"] = warmup
    stats["copy_check"] = stats.pop("copy_check", None) or {"skipped": copy_skip}
    final = save_policy(model, tokenizer, run_dir / "final", agent_config)
    trainable, total = trainable_share(model)
    stats.update(
        device=str(model_device(model)),
        trainable_parameters=trainable,
        parameters=total,
        demonstrations=len(demos),
        worlds=len(worlds),
        tasks=sum(len(world.tasks(config.data.splits)) for world in worlds),
        rejected_samples=rejected,
        label_tokens=sum(e.num_label_tokens for e in examples),
        tokens=sum(len(e.input_ids) for e in examples),
        wall_seconds=time.perf_counter() - t_start,
    )
    (run_dir / "sft_stats.json").write_text(json.dumps(stats, indent=2))
    return final


class _CopyTask:
    """Random copy batches (``copy_warmup_batch``) over the tokens the demonstrations' copied ids
    are made of: the warm-up's data and SFT's optional mixed-in copy loss."""

    def __init__(self, config: SFTConfig, demos: list[Demonstration], chat: ChatFormat, device: torch.device):
        self.pool = sorted({t for d in demos for value in copied_values(d.messages) for t in chat.encode(value)})
        if not self.pool:
            raise ConfigError("trainer.copy_warmup_steps / copy_mix_weight > 0 need demonstrations that copy ids "
                              "from their context")
        self.cfg, self.device = config.trainer, device
        self.autocast = config.policy.autocast and device.type == "cuda"
        self.generator = torch.Generator().manual_seed(config.seed)
        tokenizer = chat.tokenizer
        self.bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else chat.pad_token_id

    def loss(self, model: torch.nn.Module) -> torch.Tensor:
        batch = copy_warmup_batch(self.pool, self.cfg.copy_warmup_length, self.cfg.copy_warmup_batch_size,
                                  self.generator, self.bos, context=self.cfg.copy_warmup_context)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
            return copy_warmup_loss(model, batch.to(self.device), self.cfg.copy_warmup_length)


def _copy_warmup(config: SFTConfig, model: torch.nn.Module, task: _CopyTask,
                 probes: list[CopyProbe]) -> dict[str, Any]:
    """The copy warm-up (``trainer.copy_warmup_steps``); returns its loss and the copy check after it."""
    cfg = config.trainer
    optimizer = make_optimizer(model, cfg.lr, cfg.weight_decay)
    scheduler = make_scheduler(optimizer, cfg.copy_warmup_steps, int(cfg.warmup_ratio * cfg.copy_warmup_steps),
                               "cosine", cfg.min_lr_ratio)
    model.train()
    t0, loss = time.perf_counter(), torch.tensor(float("nan"))
    with progress_bar(cfg.copy_warmup_steps, "copy warm-up", enabled=config.progress) as bar:
        for _ in range(cfg.copy_warmup_steps):
            loss = task.loss(model)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            bar.update(1, loss=f"{loss.item():.3f}")
    result: dict[str, Any] = {"steps": cfg.copy_warmup_steps, "final_loss": loss.item(),
                              "pool_tokens": len(task.pool), "seconds": time.perf_counter() - t0}
    if probes:
        result["copy_check"] = copy_accuracy(model, probes).as_metrics()
    return result


def _fit(config: SFTConfig, model: torch.nn.Module, examples: list[SFTExample], pad_token_id: int,
         run_dir: Path, probes: list[CopyProbe] = (), copy_task: _CopyTask | None = None,
         relabelled: Callable[[int], list[SFTExample]] | None = None) -> dict[str, Any]:
    """The SFT loop; ``relabelled(epoch)``, when given, is each epoch's examples (fresh ids)."""
    cfg = config.trainer
    steps_per_epoch = -(-len(examples) // cfg.batch_size)
    total = cfg.epochs * steps_per_epoch
    optimizer = make_optimizer(model, cfg.lr, cfg.weight_decay)
    scheduler = make_scheduler(optimizer, total, int(cfg.warmup_ratio * total), "cosine", cfg.min_lr_ratio)
    tracker = make_tracker(run_dir, config.logging.trackers, run_name=f"sft-seed{config.seed}", group="sft",
                           project=config.logging.project, config=to_dict(config))
    order_rng = random.Random(config.seed)
    forward = PolicyForward(model, compile=cfg.compile, autocast=config.policy.autocast)
    model.train()
    step, loss_value = 0, float("nan")
    copy_curve: list[dict[str, float]] = []
    with progress_bar(total, "sft", enabled=config.progress) as bar:
        for epoch in range(cfg.epochs):
            if relabelled is not None:
                examples = relabelled(epoch)
            order = list(range(len(examples)))
            order_rng.shuffle(order)
            for start in range(0, len(order), cfg.batch_size):
                batch = [examples[i] for i in order[start : start + cfg.batch_size]]
                t0 = time.perf_counter()
                loss_value, tokens = _optimizer_step(forward, batch, cfg, pad_token_id)
                copy_loss = None
                if copy_task is not None and cfg.copy_mix_weight > 0:
                    copy_loss = copy_task.loss(model)
                    (cfg.copy_mix_weight * copy_loss).backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                seconds = time.perf_counter() - t0
                record = {"sft/loss": loss_value, "sft/grad_norm": float(grad_norm),
                          "sft/lr": scheduler.get_last_lr()[0], "sft/epoch": epoch,
                          "perf/step_s": seconds, "perf/tokens_per_s": tokens / max(seconds, 1e-9)}
                if copy_loss is not None:
                    record["sft/copy_mix_loss"] = copy_loss.item()
                every = config.data.copy_check_every
                if probes and (start + cfg.batch_size >= len(order) or (every and step % every == 0)):
                    score = copy_accuracy(model, probes).as_metrics()
                    copy_curve.append({"step": step, "epoch": epoch, **score})
                    record.update(score)
                tracker.log(record, step)
                bar.update(1, loss=f"{loss_value:.3f}", epoch=epoch)
    tracker.close()
    model.eval()
    stats: dict[str, Any] = {"optimizer_steps": step, "final_loss": loss_value, "examples": len(examples)}
    if copy_curve:
        stats["copy_check"] = {**copy_curve[-1], "curve": copy_curve}
    return stats


def _optimizer_step(forward: PolicyForward, batch: list[SFTExample], cfg: SFTTrainerConfig,
                    pad_token_id: int) -> tuple[float, int]:
    """Accumulate the token-mean NLL of ``batch`` over micro-batches; returns (loss, tokens)."""
    label_total = sum(e.num_label_tokens for e in batch)
    batch = sorted(batch, key=lambda e: len(e.input_ids))  # micro-batches of similar lengths pad little
    loss_sum, tokens = 0.0, 0
    for start in range(0, len(batch), cfg.micro_batch_size):
        input_ids, attention_mask, label_mask = collate_examples(batch[start : start + cfg.micro_batch_size],
                                                                 pad_token_id)
        scores = forward.token_logprobs(input_ids, attention_mask, label_mask)
        loss = -scores.logprobs.sum() / max(label_total, 1)
        loss.backward()
        loss_sum += loss.item()
        tokens += int(attention_mask.sum())
    return loss_sum, tokens
