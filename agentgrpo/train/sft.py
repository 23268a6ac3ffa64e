"""SFT warm-up on teacher transcripts, with Render-Twice-Diff loss masking.

``train_sft`` reads top to bottom: the environment and its training worlds (``env.train_worlds``:
many worlds teach the policy to read ids from its context instead of memorising one world's)
→ the oracle's demonstrations on ``data.splits`` and the examples rendered from them
(``agentgrpo.train.demonstrations``) → the policy (a built preset, its tokenizer trained on
those worlds' text, or a checkpoint) → an optional copy warm-up → the SFT loop (``_fit``),
with a copy check (``agentgrpo.train.copy_check``) on held-out validation worlds logged each
epoch → the final checkpoint and ``sft_stats.json``. The settings are
``agentgrpo.train.sft_config``. The loss is the mean negative log-likelihood over all labelled
tokens of an optimizer batch, however it is split into micro-batches. Every sequence starts
with the same system prompt, so the forward pass computes it once per micro-batch
(``agentgrpo.policy.forward``).
"""
from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from agentgrpo.agent.chat import ChatFormat, policy_view
from agentgrpo.agent.masking import IGNORE_INDEX, SFTExample, build_sft_examples
from agentgrpo.config import ConfigError, to_dict, to_yaml
from agentgrpo.envs.delex import slot_tokens
from agentgrpo.envs.registry import EnvBundle, build_env, build_training_worlds, id_kinds
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
from agentgrpo.policy.tokenizer import domain_corpus
from agentgrpo.progress import progress_bar
from agentgrpo.tracking import make_tracker
from agentgrpo.train.copy_check import (
    CopyProbe,
    copied_values,
    copy_accuracy,
    copy_warmup_batch,
    copy_warmup_loss,
)
from agentgrpo.train.demonstrations import (
    Demonstration,
    augmented_examples,
    collect_demonstrations,
    copy_probes,
    transcript_text,
)
from agentgrpo.train.optim import make_optimizer, make_scheduler
from agentgrpo.train.sft_config import SFTConfig, SFTTrainerConfig


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
    if config.data.permute_slots and not config.env.delexicalise:
        raise ConfigError("data.permute_slots=true renumbers delexicalised slots: it needs env.delexicalise=true")
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
    if config.data.relabel_ids or config.data.permute_slots:
        slot_kinds = id_kinds(config.env) if config.data.permute_slots else ()

        def relabelled(epoch: int) -> list[SFTExample]:
            return augmented_examples(chat, demos, config.seed, epoch, config.data.max_length,
                                      relabel=config.data.relabel_ids, slot_kinds=slot_kinds)
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
