"""The HF transformers policy backend: build a preset, load and save checkpoints, one-episode use.

* ``build_policy("tiny", corpus, out_dir)`` trains a domain tokenizer, builds a randomly
  initialised ``LlamaForCausalLM`` of the preset's shape wired to that tokenizer's ids,
  and saves both in standard HF format (safetensors), so ``AutoTokenizer`` /
  ``AutoModelForCausalLM.from_pretrained(out_dir)`` load them anywhere.
* ``load_policy(source, dtype, device)`` loads a checkpoint directory (full weights or a
  LoRA adapter, merged), a Hub id through the local HF cache, a ``.gguf`` file, or the
  preset name ``smollm2-135m``; ``load_for_training(policy_config)`` adds the training
  setup (device, LoRA adapters, gradient checkpointing).
* ``save_policy`` writes a checkpoint atomically: into a temporary sibling directory
  that is renamed into place, so a crash never leaves a half-written checkpoint.
* ``HFPolicy`` bundles model, tokenizer and ``ChatFormat`` for one episode at a time
  (CLI, evaluation); batched rollouts use ``agentgrpo.rollout``.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
)

from agentgrpo.agent.chat import ChatFormat, Message
from agentgrpo.config import AgentGRPOError, ConfigError, DataError
from agentgrpo.policy.device import enable_gradient_checkpointing, place, resolve_device
from agentgrpo.policy.gguf import load_gguf
from agentgrpo.policy.hub import resolve_source
from agentgrpo.policy.lora import (
    adapter_base,
    adapts_embeddings,
    attach_lora,
    is_peft_model,
    load_adapter,
)
from agentgrpo.policy.presets import PRESETS, get_preset
from agentgrpo.policy.settings import PolicyConfig
from agentgrpo.policy.source import PolicySource, resolve_policy_source
from agentgrpo.policy.tokenizer import END_OF_TEXT, IM_END, train_tokenizer

if TYPE_CHECKING:
    from agentgrpo.envs.config import EnvConfig


def build_policy(
    preset: str,
    corpus: Sequence[str],
    out_dir: str | Path,
    seed: int = 0,
    agent_config: dict[str, Any] | None = None,
    atomic_texts: Sequence[str] = (),
    tokenizer_split: str = "word",
) -> tuple[Any, Any]:
    """Train the tokenizer, build the preset's Llama with seeded weights, save to ``out_dir``.

    ``atomic_texts``: strings the tokenizer keeps as one token each (``train_tokenizer``)."""
    spec = get_preset(preset)
    if spec.kind != "built":
        raise ValueError(
            f"preset {preset!r} is a pretrained checkpoint: use load_policy({preset!r})"
        )
    context = int(spec.config.get("max_position_embeddings", 16384))
    tokenizer = train_tokenizer(corpus, spec.vocab_size, model_max_length=context, atomic_texts=atomic_texts,
                                split=tokenizer_split)
    bos_id = tokenizer.convert_tokens_to_ids(END_OF_TEXT)
    eos_id = tokenizer.convert_tokens_to_ids(IM_END)
    config = LlamaConfig(
        **{**spec.config, "vocab_size": len(tokenizer)},
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):  # seeded init without touching the caller's RNG
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    # generation stops at the end of the assistant turn
    model.generation_config = GenerationConfig(
        bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=tokenizer.pad_token_id
    )
    model.eval()
    save_policy(model, tokenizer, out_dir, agent_config)
    return model, tokenizer


def load_policy(source: str | Path, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None,
                *, adapter: Literal["merge", "train"] = "merge") -> tuple[Any, Any]:
    """``(model, tokenizer)`` from a checkpoint directory (full weights or a LoRA adapter), a Hub
    id (through the local HF cache, see ``agentgrpo.policy.hub``), a ``.gguf`` file or "smollm2-135m".

    device: where to put the model (None: where it loaded, the CPU). A LoRA adapter is
    loaded on its base and merged into it (``adapter="merge"``, for inference) or kept as
    trainable adapters (``"train"``, to continue training it).
    """
    model, tokenizer = _load(resolve_policy_source(source), dtype, adapter)
    if device is not None:
        model = place(model, torch.device(device))
    model.eval()
    return model, tokenizer


def _load(source: PolicySource, dtype: torch.dtype, adapter: str) -> tuple[Any, Any]:
    path = source.path
    if source.kind == "built" or path is None:
        raise ConfigError(f"preset {source.name!r} is built, not downloaded: create it with "
                          f"build_policy({source.name!r}, corpus, out_dir) and load that directory")
    if source.kind == "gguf":
        return load_gguf(path, dtype=dtype)
    if source.kind == "adapter":
        base, base_tokenizer = _load(resolve_policy_source(adapter_base(path)), dtype, "merge")
        tokenizer = (_guarded(path, lambda: AutoTokenizer.from_pretrained(str(path))) if _has_tokenizer(path)
                     else base_tokenizer)
        return _guarded(path, lambda: load_adapter(base, path, trainable=adapter == "train")), tokenizer
    tokenizer = _guarded(path, lambda: AutoTokenizer.from_pretrained(str(path)))
    return _guarded(path, lambda: AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)), tokenizer


def load_tokenizer(source: str | Path) -> Any:
    """The tokenizer of a policy source, without loading its weights (GGUF files and presets load both)."""
    resolved = resolve_policy_source(source)
    path = resolved.path
    if resolved.kind in ("built", "gguf") or path is None:
        return _load(resolved, torch.float32, "merge")[1]
    if resolved.kind == "adapter" and not _has_tokenizer(path):
        return load_tokenizer(adapter_base(path))
    return _guarded(path, lambda: AutoTokenizer.from_pretrained(str(path)))


def _has_tokenizer(directory: Path) -> bool:
    return any((directory / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json"))


def _guarded(path: Path, load: Any) -> Any:
    """``load()``; a truncated or corrupt file becomes a DataError naming the checkpoint (cause kept for --debug)."""
    try:
        return load()
    except AgentGRPOError:
        raise
    except Exception as e:
        files = ", ".join(sorted(p.name for p in path.glob("*.safetensors"))) or "no *.safetensors"
        reason = " ".join(str(e).split())[:300] or type(e).__name__
        raise DataError(f"cannot load the checkpoint {path} ({files}): {type(e).__name__}: {reason}; "
                        "re-save or re-copy it") from e


def load_for_training(config: PolicyConfig, source: str | Path | None = None) -> tuple[Any, Any]:
    """The model a trainer updates, from ``source`` (default ``config.init``), set up as ``config`` says.

    On ``config.device`` in ``config.dtype``; with ``config.lora.rank > 0``, LoRA adapters:
    a LoRA checkpoint continues with its own adapter, full weights get fresh ones; with
    ``gradient_checkpointing``, activations recomputed in the backward pass.
    """
    source = str(source if source is not None else config.init)
    lora = config.lora.enabled
    model, tokenizer = load_policy(source, getattr(torch, config.dtype), adapter="train" if lora else "merge")
    return prepare_for_training(model, config, source), tokenizer


def prepare_for_training(model: Any, config: PolicyConfig, base: str | Path) -> Any:
    """LoRA adapters (if asked and not there yet), gradient checkpointing, device placement.

    ``base``: where ``model``'s weights come from (recorded in a fresh adapter's config).
    """
    if config.lora.enabled and not is_peft_model(model):
        model = attach_lora(model, config.lora, base)
    if config.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    return place(model, resolve_device(config.device))


AGENT_CONFIG_FILE = "agentgrpo.json"
"""How the checkpoint talks to the environment (e.g. its system-prompt style), saved beside it."""


def write_model_files(model: Any, tokenizer: Any, directory: str | Path,
                      agent_config: dict[str, Any] | None = None) -> None:
    """Model (safetensors; a LoRA model: its adapter), tokenizer and agent config into ``directory``
    (not atomic: see save_policy)."""
    if is_peft_model(model):  # saved as it was trained: peft's "auto" would ask the Hub about the base
        model.save_pretrained(str(directory), safe_serialization=True,
                              save_embedding_layers=adapts_embeddings(model))
    else:
        model.save_pretrained(str(directory), safe_serialization=True)
    tokenizer.save_pretrained(str(directory))
    if agent_config is not None:
        (Path(directory) / AGENT_CONFIG_FILE).write_text(json.dumps(agent_config, indent=2, sort_keys=True))


def load_agent(source: str | Path, tools: Sequence[dict[str, Any]], policy: str,
               dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> tuple[Any, ChatFormat]:
    """``(model, chat)`` for acting from ``source``: ``load_policy``'s model, and its tokenizer in the
    chat format the checkpoint was trained with (the prompt style its ``agentgrpo.json`` records),
    with ``tools`` and the ``policy`` text (a domain's ``tool_schemas()`` and ``policy``)."""
    model, tokenizer = load_policy(source, dtype, device=device)
    return model, ChatFormat(tokenizer, tools, policy, prompt_style=read_agent_config(source)["prompt_style"])


def read_agent_config(source: str | Path) -> dict[str, Any]:
    """The agent config saved with a checkpoint; pretrained models get the full prompt."""
    path = Path(resolve_source(source)) / AGENT_CONFIG_FILE
    config: dict[str, Any] = {"prompt_style": "full"}
    if path.is_file():
        config.update(json.loads(path.read_text()))
    return config


def resolve_delexicalise(requested: bool | None, source: str | Path, key: str = "delexicalise") -> bool:
    """Whether the policy from ``source`` reads a delexicalised world (``key``: ``delexicalise``,
    or ``delexicalise_places`` for places as slots too): ``requested`` (the config's ``env.<key>``),
    or the checkpoint's own choice (its ``agentgrpo.json``) when that is None; off for a built
    preset or a model that records none (a checkpoint that records ``delexicalise`` and not
    ``key`` was trained without it). A ConfigError naming ``env.<key>`` when the config
    contradicts the checkpoint: its tokens mean ids in one view and not the other."""
    preset = PRESETS.get(str(source))
    agent_config = {} if preset is not None and preset.kind == "built" else read_agent_config(source)
    recorded = agent_config.get(key, False if "delexicalise" in agent_config else None)
    if requested is None:
        return bool(recorded)
    if recorded is not None and bool(recorded) != requested:
        raise ConfigError(f"env.{key}={str(requested).lower()} is invalid: the policy {source} "
                          f"was trained with {key}={str(bool(recorded)).lower()}; leave env.{key} "
                          "unset to use the checkpoint's")
    return requested


def resolve_view(env: EnvConfig, source: str | Path) -> EnvConfig:
    """A copy of ``env`` with ``delexicalise`` and ``delexicalise_places`` set to the view the
    policy from ``source`` reads (``resolve_delexicalise`` of each; the copy's checks run again,
    ``EnvConfig.check_view`` among them)."""
    return dataclasses.replace(
        env, delexicalise=resolve_delexicalise(env.delexicalise, source),
        delexicalise_places=resolve_delexicalise(env.delexicalise_places, source, "delexicalise_places"))


def save_policy(model: Any, tokenizer: Any, out_dir: str | Path,
                agent_config: dict[str, Any] | None = None) -> Path:
    """Save model (safetensors) and tokenizer to ``out_dir``, replacing it atomically.

    Everything is written to a temporary directory next to ``out_dir`` and renamed into
    place; an existing ``out_dir`` is moved aside first and deleted last, so at every
    moment either the old or the new complete checkpoint exists.
    """
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    staging = out.parent / f".{out.name}.tmp-{tag}"
    try:
        write_model_files(model, tokenizer, staging, agent_config)
        old = out.parent / f".{out.name}.old-{tag}"
        if out.exists():
            out.rename(old)
        try:
            staging.rename(out)
        except OSError:
            if old.exists():  # put the previous checkpoint back
                old.rename(out)
            raise
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


class HFPolicy:
    """A transformers model with its tokenizer and chat format, for one episode at a time."""

    def __init__(self, model: Any, tokenizer: Any, tools: Sequence[dict[str, Any]], policy: str,
                 *, system_prompt: str | None = None, prompt_style: str = "full"):
        self.model = model
        self.tokenizer = tokenizer
        self.chat = ChatFormat(tokenizer, tools, policy, system_prompt=system_prompt, prompt_style=prompt_style)

    @classmethod
    def load(cls, source: str | Path, tools: Sequence[dict[str, Any]], policy: str,
             dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> HFPolicy:
        """The policy from ``source``, prompted as it was trained (``load_agent``)."""
        model, chat = load_agent(source, tools, policy, dtype, device)
        return cls(model, chat.tokenizer, tools, policy, prompt_style=chat.prompt_style)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @torch.inference_mode()
    def generate_turn(self, messages: Sequence[Message], max_new_tokens: int = 256,
                      temperature: float = 0.0, seed: int | None = None) -> str:
        """Generate the next assistant turn; returns its text without the end-of-turn token.

        temperature 0 is greedy; otherwise plain sampling (no top-k/top-p), seeded by ``seed``.
        """
        prompt = self.chat.encode_prompt(messages)
        input_ids = torch.tensor([prompt], dtype=torch.long, device=self.device)
        sampling = {}
        if temperature > 0:
            sampling = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
        config = GenerationConfig(
            max_new_tokens=max_new_tokens,
            eos_token_id=self.chat.eos_token_ids,
            pad_token_id=self.chat.pad_token_id,
            **sampling,
        )
        cuda_devices = [self.device.index or 0] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda_devices):  # the caller's RNG stays as it was
            if seed is not None:
                torch.manual_seed(seed)
            output = self.model.generate(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                generation_config=config,
            )
        generated = output[0, len(prompt):].tolist()
        if generated and generated[-1] in self.chat.eos_token_ids:
            generated = generated[:-1]
        return self.chat.decode(generated)

    def sequence_logprobs(self, input_ids: torch.Tensor, response_mask: torch.Tensor,
                          attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Per-token log-probs ``log p(x_t | x_<t)`` where ``response_mask`` is 1, else 0.

        input_ids, response_mask, attention_mask: (B, T), right-padded. Returns (B, T),
        aligned with ``input_ids`` like ``Trajectory.logprobs``; sum over T for a sequence's
        log-likelihood. Differentiable (call under ``torch.no_grad()`` to score only).
        """
        from agentgrpo.policy.forward import token_logprobs

        input_ids = torch.as_tensor(input_ids, dtype=torch.long, device=self.device)
        mask = torch.as_tensor(response_mask, device=self.device)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        attention_mask = torch.as_tensor(attention_mask, device=self.device)
        return token_logprobs(self.model, input_ids, attention_mask, mask).logprobs
