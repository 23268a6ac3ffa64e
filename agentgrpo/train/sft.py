"""SFT warm-up on teacher transcripts, with Render-Twice-Diff loss masking.

``train_sft`` reads top to bottom: the environment and its training worlds (``env.train_worlds``:
many worlds teach the policy to read ids from its context instead of memorising one world's)
→ the oracle's demonstrations on ``data.splits`` and the examples rendered from them
(``agentgrpo.train.demonstrations``) → the policy (a built preset, its tokenizer trained on
those worlds' text, or a checkpoint) → an optional copy warm-up → the SFT loop (``_fit``),
with a copy check (``agentgrpo.train.copy_check``) on held-out validation worlds logged each
epoch and a checkpoint every ``trainer.save_every`` optimizer steps → the final checkpoint and
``sft_stats.json``. The settings are
``agentgrpo.train.sft_config``. The loss is the mean negative log-likelihood over all labelled
tokens of an optimizer batch, however it is split into micro-batches. Every sequence starts
with the same system prompt, so the forward pass computes it once per micro-batch
(``agentgrpo.policy.forward``).

A killed run resumes (``resume=True``, ``agentgrpo sft --resume``) from its latest checkpoint, in
the format of ``agentgrpo.train.checkpoint`` and checked against the config as GRPO's are
(``agentgrpo.train.resume``): the loop replays the epochs' example orders up to the checkpoint's
step without computing those steps, so the rest of the run is the uninterrupted run's.
"""
from __future__ import annotations

import copy
import json
import math
import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from agentgrpo.agent.chat import ChatFormat
from agentgrpo.agent.masking import SFTExample
from agentgrpo.config import ConfigError, to_dict, to_yaml
from agentgrpo.envs.delex import slot_token, slot_tokens
from agentgrpo.envs.registry import EnvBundle, build_env, build_training_worlds, id_kinds, write_tools
from agentgrpo.policy.device import AutocastOn, model_device, resolve_device
from agentgrpo.policy.forward import PolicyForward
from agentgrpo.policy.hf import (
    build_policy,
    load_agent,
    load_for_training,
    prepare_for_training,
    read_agent_config,
    resolve_view,
    save_policy,
)
from agentgrpo.policy.lora import trainable_share
from agentgrpo.policy.presets import PRESETS
from agentgrpo.policy.tokenizer import domain_corpus
from agentgrpo.progress import progress_bar
from agentgrpo.tracking import make_tracker
from agentgrpo.train.checkpoint import (
    RFT_ROUNDS_DIR,
    can_continue,
    load_trainer_state,
    restore_training_state,
    save_checkpoint,
)
from agentgrpo.train.copy_check import (
    CopyProbe,
    SlotRecallTokens,
    copied_values,
    copy_accuracy,
    copy_warmup_batch,
    copy_warmup_labels,
    slot_recall_batch,
    slot_recall_tokens,
)
from agentgrpo.train.demonstrations import (
    Demonstration,
    LabelWeights,
    augmented_examples,
    collect_demonstrations,
    copy_probes,
    demonstration_openings,
    opening_demonstrations,
    training_examples,
    transcript_text,
)
from agentgrpo.train.optim import make_optimizer, make_scheduler
from agentgrpo.train.recovery import PolicySlips, greedy_turns
from agentgrpo.train.resume import resume_checkpoint
from agentgrpo.train.rft import EPISODES_FILE, load_own_episodes, own_successful_episodes, save_own_episodes
from agentgrpo.train.sft_config import SFTConfig, SFTTrainerConfig


def resolve_prompt_style(config: SFTConfig) -> str:
    if config.prompt_style is not None:
        return config.prompt_style
    preset = PRESETS.get(config.policy.init)
    if preset is not None:
        return "compact" if preset.kind == "built" else "full"
    return read_agent_config(config.policy.init)["prompt_style"]  # the checkpoint's own (full if it says none)


def prepare_policy(config: SFTConfig, worlds: list[EnvBundle], demos: list[Demonstration],
                   agent_config: dict[str, Any], resumed: Path | None = None) -> tuple[Any, Any]:
    """Build a preset (tokenizer trained on the training worlds' text + teacher transcripts) or
    load a checkpoint; then place it and add LoRA / gradient checkpointing as ``config.policy`` says.
    ``resumed``: the training checkpoint a resumed run continues from, whose model (or adapter)
    and tokenizer are loaded instead."""
    if resumed is not None:
        return load_for_training(config.policy, resumed / "model")
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


def check_acting_policy(config: SFTConfig, key: str, source: str) -> None:
    """A trained policy that acts on this SFT's demonstrations (``data.<key>``) must exist and
    read the view of ids they are in: else a ConfigError naming the key, before any work."""
    if not Path(source).is_dir():
        raise ConfigError(f"data.{key}={source!r} is invalid: no such checkpoint directory")
    seen = read_agent_config(source)
    for view in ("delexicalise", "delexicalise_places"):
        trained, shown = bool(seen.get(view)), bool(getattr(config.env, view))
        if trained != shown:
            raise ConfigError(f"data.{key}={source!r} is invalid: it was trained with {view}={trained}, "
                              f"these demonstrations have env.{view}={shown}")


def _policy_slips(config: SFTConfig, bundle: EnvBundle) -> PolicySlips | None:
    """The ``policy`` recovery fault's slip finder: ``data.recovery_policy`` decoding greedily on
    the demonstrations as it sees them, which must be as this SFT shows them."""
    source = config.data.recovery_policy
    if source is None or not config.data.recovery_share:  # a source is given exactly with the policy fault
        return None
    check_acting_policy(config, "recovery_policy", source)
    model, chat = load_agent(source, bundle.domain.tool_schemas(), bundle.domain.policy,
                             device=resolve_device(config.policy.device))  # where the SFT itself runs
    kinds = id_kinds(config.env) if config.env.delexicalise else None
    return PolicySlips(chat, greedy_turns(model, chat, use_autocast=config.policy.autocast_devices), kinds)


def collate_examples(examples: list[SFTExample], pad_token_id: int) -> tuple[torch.Tensor, ...]:
    """(input_ids, attention_mask, label_mask), each (B, T), right-padded; ``label_mask`` holds
    each token's loss weight (``SFTExample.label_weights``: 0 where unlabelled)."""
    width = max(len(e.input_ids) for e in examples)
    input_ids = torch.full((len(examples), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros(len(examples), width, dtype=torch.long)
    label_mask = torch.zeros(len(examples), width, dtype=torch.float32)
    for row, example in enumerate(examples):
        n = len(example.input_ids)
        input_ids[row, :n] = torch.tensor(example.input_ids)
        attention_mask[row, :n] = 1
        label_mask[row, :n] = torch.tensor(example.label_weights())
    return input_ids, attention_mask, label_mask


def _examples(config: SFTConfig, chat: ChatFormat, demos: list[Demonstration]) -> tuple[
        list[SFTExample], int, Callable[[int], list[SFTExample]] | None]:
    """``(examples, rejected, per_epoch)``: the demonstrations' examples, how many could not be
    rendered, and, when ``data.relabel_ids`` or ``data.permute_slots`` asks for fresh ids or slot
    numbers on every pass, the function giving each epoch's examples (else None)."""
    weights, max_length = LabelWeights.of(config.trainer), config.data.max_length
    examples, rejected = training_examples(chat, [d.messages for d in demos], max_length, weights,
                                           [d.untrained for d in demos])
    if not (config.data.relabel_ids or config.data.permute_slots):
        return examples, rejected, None
    slot_kinds = id_kinds(config.env) if config.data.permute_slots else ()

    def per_epoch(epoch: int) -> list[SFTExample]:
        return augmented_examples(chat, demos, config.seed, epoch, max_length, relabel=config.data.relabel_ids,
                                  slot_kinds=slot_kinds, weights=weights)
    return examples, rejected, per_epoch


def _probe_renumbering(config: SFTConfig) -> random.Random | None:
    """The copy check's slots are renumbered at random under delexicalisation: in order of first
    appearance the usual slot (``<U1>``, ``<R1>``) scores without copying anything."""
    return random.Random(config.seed + 2) if config.env.delexicalise else None


def train_sft(config: SFTConfig, demonstrations: list[Demonstration] | None = None, resume: bool = False,
              force: bool = False) -> Path:
    """Run SFT; returns the directory of the final checkpoint (``run_dir/final``).

    ``demonstrations``: transcripts to learn from instead of the oracle's on ``data.splits``
    (``agentgrpo sanity``'s format warm-up, whose toy-domain keys are random on purpose).
    ``resume`` continues from the run's latest checkpoint (a fresh run if it has none), refusing a
    config that differs from the checkpoint's outside ``RESUME_MAY_CHANGE`` unless ``force``.
    """
    t_start = time.perf_counter()
    run_dir = Path(config.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    given = to_yaml(config)  # config.yaml: the settings as given (env.delexicalise unresolved)
    # data.rft_rounds: the rounds before the last first, each its own SFT run under run_dir
    earlier_player = _earlier_rounds(config, resume, force) if demonstrations is None and config.data.rft_rounds \
        else None
    torch.manual_seed(config.seed)
    # which oracle's demonstrations of which splits taught it (GRPO's demonstration term replays the same)
    config.env = resolve_view(config.env, config.policy.init)
    agent_config = {"prompt_style": resolve_prompt_style(config), "delexicalise": config.env.delexicalise,
                    "delexicalise_places": config.env.delexicalise_places,
                    "oracle_arithmetic": config.env.oracle_arithmetic, "oracle_goal": config.env.oracle_goal,
                    "demonstrated_splits": list(config.data.splits)}
    if config.data.permute_slots and not config.env.delexicalise:
        raise ConfigError("data.permute_slots=true renumbers delexicalised slots: it needs env.delexicalise=true")
    if _uses_slot_task(config) and not config.env.delexicalise:
        raise ConfigError("trainer.copy_warmup_task=slot recalls delexicalised slots: it needs env.delexicalise=true")
    resumed = resume_checkpoint(run_dir, config, force=force) if resume else None
    if resumed is None:
        (run_dir / "config.yaml").write_text(given)
    bundle = build_env(config.env)
    worlds = build_training_worlds(config.env, training=bundle)
    slips = _policy_slips(config, bundle) if demonstrations is None else None
    rft_source = earlier_player or (config.data.rft_policy if demonstrations is None else None)
    if rft_source is not None:
        check_acting_policy(config, "rft_policy", rft_source)
    demos = demonstrations if demonstrations is not None else collect_demonstrations(
        worlds, config.env, config.data.splits, config.data.demos_per_task, config.seed,
        config.data.recovery_share, config.data.recovery_faults, slips)
    own = None
    if rft_source is not None:
        # what was sampled is kept in run_dir: a resumed run reads it back instead of sampling again
        sampling = {"player": rft_source, "samples": config.data.rft_samples, "seed": config.seed,
                    "rollout": to_dict(config.data.rft_rollout), "splits": list(config.data.splits),
                    "env": to_dict(config.env)}
        own = load_own_episodes(run_dir / EPISODES_FILE, sampling) if resume else None
        if own is None:
            own = own_successful_episodes(rft_source, worlds, config.env, config.data.splits,
                                          config.data.rft_samples, config.data.rft_rollout, config.seed,
                                          write_tools(config.env) or (), config.policy.autocast_devices,
                                          resolve_device(config.policy.device))
            save_own_episodes(own, run_dir / EPISODES_FILE, sampling)
        demos = demos + own.demos
    if not demos:
        raise RuntimeError("the oracle produced no successful demonstrations for the SFT splits")
    model, tokenizer = prepare_policy(config, worlds, demos, agent_config, resumed)
    chat = ChatFormat(tokenizer, bundle.domain.tool_schemas(), bundle.domain.policy,
                      prompt_style=agent_config["prompt_style"])
    reads = config.data.opening_reads
    openings = opening_demonstrations(worlds, config.env, config.data.opening_splits, config.seed, reads) \
        if config.data.opening_splits and demonstrations is None else []
    openings += demonstration_openings(demos, reads) * config.data.opening_repeats
    examples, rejected, relabelled = _examples(config, chat, demos + openings)
    probes, copy_skip = (([], "off (demonstrations given)") if demonstrations is not None
                         else copy_probes(config, bundle, chat, _probe_renumbering(config)))
    copy_task = _CopyTask(config, demos, examples, chat) if (
        config.trainer.copy_warmup_steps or config.trainer.copy_mix_weight) else None
    checkpoints = _Checkpoints(config, tokenizer, agent_config, copy_task, resumed)
    if resumed is None and config.trainer.copy_warmup_steps:
        checkpoints.copy_warmup = _copy_warmup(config, model, copy_task, probes)
    stats = _fit(config, model, examples, chat.pad_token_id, checkpoints, probes, copy_task, relabelled,
                 resume=resume)
    if checkpoints.copy_warmup is not None:
        stats["copy_warmup"] = checkpoints.copy_warmup
    stats["copy_check"] = stats.pop("copy_check", None) or {"skipped": copy_skip}
    final = save_policy(model, tokenizer, run_dir / "final", agent_config)
    trainable, total = trainable_share(model)
    stats.update(
        device=str(model_device(model)),
        trainable_parameters=trainable,
        parameters=total,
        demonstrations=len(demos),
        recovery_demonstrations=dict(sorted(Counter(d.fault for d in demos if d.fault).items())),
        **({"policy_slips": dict(sorted(slips.counts.items()))} if slips is not None else {}),
        **({"rft": own.stats()} if own is not None else {}),
        **({"rft_player": rft_source} if rft_source is not None else {}),
        openings=len(openings),
        worlds=len(worlds),
        tasks=sum(len(world.tasks(config.data.splits)) for world in worlds),
        rejected_samples=rejected,
        label_tokens=sum(e.num_label_tokens for e in examples),
        tokens=sum(len(e.input_ids) for e in examples),
        wall_seconds=time.perf_counter() - t_start,
    )
    (run_dir / "sft_stats.json").write_text(json.dumps(stats, indent=2))
    return final


def _earlier_rounds(config: SFTConfig, resume: bool, force: bool) -> str:
    """``data.rft_rounds``: train the SFTs that play the rounds before the last, each under
    ``run_dir/rft_rounds/round<k>`` (a finished one is kept; with ``resume`` a killed one continues);
    returns the checkpoint that plays the last round. A finished round is one whose run wrote its
    stats under the same config; any other is trained (afresh, or continued with ``resume``)."""
    player = config.data.rft_policy
    for k in range(0 if player is None else 1, config.data.rft_rounds):
        round_config = copy.deepcopy(config)
        round_config.run_dir = str(Path(config.run_dir) / RFT_ROUNDS_DIR / f"round{k}")
        round_config.data.rft_rounds, round_config.data.rft_policy = 0, player
        round_dir = Path(round_config.run_dir)
        finished = ((round_dir / "sft_stats.json").is_file() and (round_dir / "config.yaml").is_file()
                    and (round_dir / "config.yaml").read_text() == to_yaml(round_config))
        player = str(round_dir / "final" if finished else
                     train_sft(round_config, resume=resume and can_continue(round_dir), force=force))
    assert player is not None  # rft_rounds >= 1: round0 at the least
    return player


class _CopyTask:
    """Random copy batches of ``trainer.copy_warmup_task``: ``segment`` (``copy_warmup_batch``) over
    the tokens the demonstrations' copied ids are made of, or ``slot`` (``slot_recall_batch``) over
    the demonstrations' tokens and the domain's slots; the warm-up's data and SFT's optional
    mixed-in copy loss."""

    def __init__(self, config: SFTConfig, demos: list[Demonstration], examples: list[SFTExample], chat: ChatFormat):
        self.cfg = config.trainer
        self.pool: list[int] = []
        self.slot_tokens: SlotRecallTokens | None = None
        if self.cfg.copy_warmup_task == "slot":
            self.slot_tokens = _slot_recall_tokens(config, examples, chat)
        else:
            self.pool = sorted({t for d in demos for value in copied_values(d.messages) for t in chat.encode(value)})
            if not self.pool:
                raise ConfigError("trainer.copy_warmup_steps / copy_mix_weight > 0 need demonstrations that copy ids "
                                  "from their context")
        self.autocast_on = config.policy.autocast_devices
        self.generator = torch.Generator().manual_seed(config.seed)
        tokenizer = chat.tokenizer
        self.bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else chat.pad_token_id

    def state_dict(self) -> dict[str, Any]:
        """The generator's state (JSON), which a resumed run continues from."""
        return {"generator": self.generator.get_state().tolist()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(torch.tensor(state["generator"], dtype=torch.uint8))

    @property
    def tokens(self) -> int:
        """The tokens the task draws from (``sft_stats.json``'s ``copy_warmup.pool_tokens``)."""
        return len(self.slot_tokens.filler) if self.slot_tokens is not None else len(self.pool)

    def loss(self, model: torch.nn.Module) -> torch.Tensor:
        cfg = self.cfg
        if self.slot_tokens is not None:
            sequences, labelled = slot_recall_batch(self.slot_tokens, cfg.copy_warmup_context, cfg.copy_warmup_queries,
                                                    cfg.copy_warmup_batch_size, self.generator, self.bos)
        else:
            sequences = copy_warmup_batch(self.pool, cfg.copy_warmup_length, cfg.copy_warmup_batch_size,
                                          self.generator, self.bos, context=cfg.copy_warmup_context)
            labelled = copy_warmup_labels(sequences, cfg.copy_warmup_length)
        return copy_task_nll(model, sequences, labelled, self.autocast_on)


def copy_task_nll(model: torch.nn.Module, sequences: torch.Tensor, labelled: torch.Tensor,
                  autocast_on: AutocastOn = True) -> torch.Tensor:
    """``labelled_nll`` through the policy's training forward, which projects only the scored
    positions onto the vocabulary (8 of a copy row's ~170 tokens), as SFT's own loss does."""
    forward = PolicyForward(model, autocast=autocast_on)
    scores = forward.token_logprobs(sequences, torch.ones_like(sequences), labelled).logprobs
    return -scores.sum() / labelled.sum().clamp(min=1).to(scores.device)


def _uses_slot_task(config: SFTConfig) -> bool:
    """Whether the run trains on the ``slot`` copy task (a warm-up or a mixed-in loss)."""
    cfg = config.trainer
    return cfg.copy_warmup_task == "slot" and bool(cfg.copy_warmup_steps or cfg.copy_mix_weight)


def _slot_recall_tokens(config: SFTConfig, examples: list[SFTExample], chat: ChatFormat) -> SlotRecallTokens:
    """The ``slot`` copy task's tokens: each id kind's slots (one token each) and the query contexts
    the demonstrations write before them."""
    slots = []
    for kind in id_kinds(config.env, "trainer.copy_warmup_task=slot"):
        ids = [chat.encode(slot_token(kind.tag, i)) for i in range(1, kind.slots + 1)]
        if any(len(one) != 1 for one in ids):
            raise ConfigError(f"trainer.copy_warmup_task=slot needs every slot as one token; the tokenizer splits "
                              f"<{kind.tag}…> slots (a checkpoint whose tokenizer was not built with them)")
        slots.append([one[0] for one in ids])
    try:
        return slot_recall_tokens(examples, slots)
    except ValueError as exc:
        raise ConfigError(f"trainer.copy_warmup_task=slot: {exc} (no demonstration copies a slot)") from None


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
    result: dict[str, Any] = {"steps": cfg.copy_warmup_steps, "task": cfg.copy_warmup_task,
                              "final_loss": loss.item(), "pool_tokens": task.tokens,
                              "seconds": time.perf_counter() - t0}
    if probes:
        result["copy_check"] = copy_accuracy(model, probes).as_metrics()
    return result


class _Checkpoints:
    """The SFT loop's checkpoints (``agentgrpo.train.checkpoint``): written every
    ``trainer.save_every`` optimizer steps, and ``resumed``, the one a resumed run continues from
    (None: a fresh run). Beside the weights, tokenizer, optimizer, schedule and RNG states, their
    ``trainer_state.json`` holds what the loop cannot recompute: the resolved config, the copy
    check's curve so far, the copy warm-up's result, the copy task's generator and the last loss."""

    def __init__(self, config: SFTConfig, tokenizer: Any, agent_config: dict[str, Any],
                 copy_task: _CopyTask | None, resumed: Path | None):
        self.config, self.tokenizer, self.agent_config, self.copy_task = config, tokenizer, agent_config, copy_task
        self.resumed = resumed
        self.state = load_trainer_state(resumed) if resumed is not None else {}
        self.copy_warmup: dict[str, Any] | None = self.state.get("copy_warmup")
        """The copy warm-up's result (``sft_stats.json``'s ``copy_warmup``); a resumed run skips it."""
        if copy_task is not None and self.state.get("copy_task") is not None:
            copy_task.load_state_dict(self.state["copy_task"])

    def restore(self, optimizer: torch.optim.Optimizer, scheduler: Any) -> tuple[list[dict[str, float]], float]:
        """Load the resumed checkpoint's optimizer, schedule and RNG states; returns the copy curve
        and loss saved with it ([] and NaN for a fresh run)."""
        if self.resumed is None:
            return [], math.nan
        restore_training_state(self.resumed, optimizer, scheduler)
        return self.state["copy_curve"], self.state["loss"]

    def save(self, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
             copy_curve: list[dict[str, float]], loss: float) -> Path:
        state = {"config": to_dict(self.config), "copy_curve": copy_curve, "loss": loss,
                 "copy_warmup": self.copy_warmup,
                 "copy_task": self.copy_task.state_dict() if self.copy_task is not None else None}
        return save_checkpoint(self.config.run_dir, step, model, self.tokenizer, optimizer, scheduler, state,
                               keep_last=self.config.trainer.keep_last, agent_config=self.agent_config)


def _fit(config: SFTConfig, model: torch.nn.Module, examples: list[SFTExample], pad_token_id: int,
         checkpoints: _Checkpoints, probes: list[CopyProbe] = (), copy_task: _CopyTask | None = None,
         relabelled: Callable[[int], list[SFTExample]] | None = None, resume: bool = False) -> dict[str, Any]:
    """The SFT loop; ``relabelled(epoch)``, when given, is each epoch's examples (fresh ids).

    From a resumed checkpoint (``checkpoints.resumed``) the epochs' examples and orders are drawn
    again but its steps are not computed, so every later step sees the uninterrupted run's batch;
    ``resume``: the metrics log is cut after that step instead of started afresh.
    """
    cfg = config.trainer
    steps_per_epoch = -(-len(examples) // cfg.batch_size)
    total = cfg.epochs * steps_per_epoch
    optimizer = make_optimizer(model, cfg.lr, cfg.weight_decay)
    scheduler = make_scheduler(optimizer, total, int(cfg.warmup_ratio * total), "cosine", cfg.min_lr_ratio)
    done = checkpoints.state.get("step", 0)
    tracker = make_tracker(config.run_dir, config.logging.trackers, run_name=f"sft-seed{config.seed}", group="sft",
                           project=config.logging.project, config=to_dict(config),
                           resume_from_step=done if resume else None)
    forward = PolicyForward(model, compile=cfg.compile, autocast=config.policy.autocast_devices)
    model.train()
    copy_curve, loss_value = checkpoints.restore(optimizer, scheduler)  # RNG states last: nothing draws before the loop
    order_rng = random.Random(config.seed)
    step = 0
    with progress_bar(total, "sft", enabled=config.progress, initial=done) as bar:
        for epoch in range(cfg.epochs):
            if relabelled is not None:
                examples = relabelled(epoch)
            order = list(range(len(examples)))
            order_rng.shuffle(order)
            for start in range(0, len(order), cfg.batch_size):
                step += 1
                if step <= done:  # trained before the checkpoint: drawn above, not computed
                    continue
                batch = [examples[i] for i in order[start : start + cfg.batch_size]]
                record = _sft_step(model, forward, batch, cfg, pad_token_id, optimizer, scheduler, copy_task)
                loss_value, record["sft/epoch"] = record["sft/loss"], epoch
                every = config.data.copy_check_every
                if probes and (start + cfg.batch_size >= len(order) or (every and step % every == 0)):
                    score = copy_accuracy(model, probes).as_metrics()
                    copy_curve.append({"step": step, "epoch": epoch, **score})
                    record.update(score)
                tracker.log(record, step)
                bar.update(1, loss=f"{loss_value:.3f}", epoch=epoch)
                if cfg.save_every and step % cfg.save_every == 0 and step < total:
                    checkpoints.save(step, model, optimizer, scheduler, copy_curve, loss_value)
    tracker.close()
    model.eval()
    stats: dict[str, Any] = {"optimizer_steps": step, "final_loss": loss_value, "examples": len(examples)}
    if copy_curve:
        stats["copy_check"] = {**copy_curve[-1], "curve": copy_curve}
    return stats


def _sft_step(model: torch.nn.Module, forward: PolicyForward, batch: list[SFTExample], cfg: SFTTrainerConfig,
              pad_token_id: int, optimizer: torch.optim.Optimizer, scheduler: Any,
              copy_task: _CopyTask | None) -> dict[str, float]:
    """One optimizer step on ``batch`` (and, with ``copy_mix_weight``, a copy batch); returns its metrics."""
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
    seconds = time.perf_counter() - t0
    record = {"sft/loss": loss_value, "sft/grad_norm": float(grad_norm), "sft/lr": scheduler.get_last_lr()[0],
              "perf/step_s": seconds, "perf/tokens_per_s": tokens / max(seconds, 1e-9)}
    if copy_loss is not None:
        record["sft/copy_mix_loss"] = copy_loss.item()
    return record


def _optimizer_step(forward: PolicyForward, batch: list[SFTExample], cfg: SFTTrainerConfig,
                    pad_token_id: int) -> tuple[float, int]:
    """Accumulate the token-mean NLL of ``batch`` over micro-batches (weighted by each token's loss
    weight); returns (loss, tokens)."""
    return nll_backward(forward, batch, cfg.micro_batch_size, pad_token_id)


def nll_backward(forward: PolicyForward, examples: list[SFTExample], micro_batch_size: int, pad_token_id: int,
                 scale: float = 1.0) -> tuple[float, int]:
    """Backpropagate ``scale`` × the token-mean NLL of ``examples`` (each token weighted by its loss
    weight, the mean over all of them), one micro-batch at a time; returns ``(NLL, tokens)``,
    the NLL unscaled. SFT's step, and the demonstration term of GRPO's updates
    (``trainer.demo_coef``)."""
    label_total = sum(sum(e.label_weights()) for e in examples)
    examples = sorted(examples, key=lambda e: len(e.input_ids))  # micro-batches of similar lengths pad little
    loss_sum, tokens = 0.0, 0
    for start in range(0, len(examples), micro_batch_size):
        input_ids, attention_mask, label_mask = collate_examples(examples[start : start + micro_batch_size],
                                                                 pad_token_id)
        scores = forward.token_logprobs(input_ids, attention_mask, label_mask)
        loss = -(scores.logprobs * label_mask.to(scores.logprobs.device)).sum() / max(label_total, 1)
        (scale * loss).backward()
        loss_sum += loss.item()
        tokens += int(attention_mask.sum())
    return loss_sum, tokens
