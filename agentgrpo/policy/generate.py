"""Batched decoding of prompts with one model: left-padded, one forward per token for the whole batch.

Each row has its own temperature, top-p, token limit, seeded generator, stop test and an optional
filter of its logits (a grammar's allowed tokens). The server's worker (``agentgrpo.serve``)
and the teacher-forced decisions of ``agentgrpo eval --decisions`` decode through it.
"""
from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.cache_utils import DynamicCache

from agentgrpo.policy.device import AutocastOn, autocast, model_device

GREEDY_BELOW = 1e-5
"""Temperatures under this decode greedily (as vLLM does): dividing by them overflows float32."""


@dataclass
class GenerationRequest:
    """One completion to decode: a prompt's token ids and how to sample after it."""

    prompt: list[int]
    max_new_tokens: int
    stop_ids: list[int]
    temperature: float = 1.0
    """0 = greedy."""
    top_p: float = 1.0
    seed: int | None = None
    """Seeds this row's sampler (None: a fresh random seed)."""
    on_token: Callable[[list[int]], bool] | None = None
    """Called in the worker with the tokens so far after each new one; True stops the row (a stop string)."""
    logits_filter: Callable[[torch.Tensor], torch.Tensor] | None = None
    """Applied to the row's (V,) next-token logits before sampling (e.g. a grammar's allowed tokens)."""
    future: Future = field(default_factory=Future)


@dataclass
class Generation:
    """What a request produced: its tokens (without the stop token) and why it ended."""

    tokens: list[int]
    finish_reason: str  # "stop" or "length"


@torch.inference_mode()
def generate_batch(model: Any, requests: list[GenerationRequest], pad_token_id: int,
                   use_autocast: AutocastOn = True) -> list[Generation]:
    """Decode every request together; see the module docstring. Greedy rows are exact argmax."""
    device = model_device(model)
    width = max(len(r.prompt) for r in requests)
    input_ids = torch.full((len(requests), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros(len(requests), width, dtype=torch.long)
    for row, request in enumerate(requests):  # left padding: every row's next token is in the last column
        input_ids[row, width - len(request.prompt):] = torch.tensor(request.prompt, dtype=torch.long)
        mask[row, width - len(request.prompt):] = 1
    input_ids, mask = input_ids.to(device), mask.to(device)
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    generators = [_generator(r.seed) for r in requests]
    out: list[list[int]] = [[] for _ in requests]
    reasons: list[str | None] = [None] * len(requests)
    cache = DynamicCache()
    with autocast(device, use_autocast):
        logits = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                       use_cache=True, logits_to_keep=1).logits[:, -1]
        while True:
            tokens = [pad_token_id if reasons[row] is not None else  # a stopped row's token is never used
                      _sample(r.logits_filter(logits[row]) if r.logits_filter else logits[row], r, generators[row])
                      for row, r in enumerate(requests)]
            for row, (request, token) in enumerate(zip(requests, tokens)):
                if reasons[row] is not None:
                    continue
                if token in request.stop_ids:
                    reasons[row] = "stop"
                    continue
                out[row].append(token)
                if request.on_token is not None and request.on_token(out[row]):
                    reasons[row] = "stop"
                elif len(out[row]) >= request.max_new_tokens:
                    reasons[row] = "length"
            if all(reason is not None for reason in reasons):
                break
            step = torch.tensor(tokens, dtype=torch.long, device=device)[:, None]
            mask = torch.cat([mask, torch.ones_like(step)], dim=1)
            positions = positions[:, -1:] + 1
            logits = model(input_ids=step, attention_mask=mask, position_ids=positions, past_key_values=cache,
                           use_cache=True).logits[:, -1]
    return [Generation(tokens, reason or "length") for tokens, reason in zip(out, reasons)]


def _sample(logits: torch.Tensor, request: GenerationRequest, generator: torch.Generator) -> int:
    """One token from (V,) logits: argmax at temperature 0, else nucleus sampling on the CPU generator."""
    if request.temperature < GREEDY_BELOW:
        return int(logits.argmax())
    logits = logits.float()
    probs = torch.softmax((logits - logits.max()) / request.temperature, dim=-1).cpu()  # no inf/inf at small T
    if request.top_p < 1.0:
        sorted_probs, order = probs.sort(descending=True)
        drop = (sorted_probs.cumsum(0) - sorted_probs) >= request.top_p
        drop[0] = False  # keep the first token always (a top_p below float32's range compares as 0)
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs.masked_fill(drop, 0.0))
    return int(torch.multinomial(probs, 1, generator=generator))


def _generator(seed: int | None) -> torch.Generator:
    generator = torch.Generator()
    if seed is None:
        generator.seed()  # non-deterministic
    else:
        generator.manual_seed(seed)
    return generator
