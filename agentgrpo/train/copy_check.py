"""SFT's copy check: does the policy read ids from its context, or recall them from training?

A policy that must act in worlds it has never seen copies ids (users, reservations, payment
methods, flights, dates) from what the user and the tools told it. The check measures that
directly, before any RL is spent: on oracle demonstrations from *held-out* worlds (the
validation worlds: never trained on, never the test worlds), teacher-forced, how often the
model's most likely next token is the right one at the tokens of each copied id, and how
often a whole id comes out right.

A copied id is a string argument of an assistant tool call that contains a digit and
appears verbatim in an earlier user or tool message: what the policy can only know by
reading its context. Nothing here knows a domain's id formats, so any domain's
demonstrations work. Pure torch over token ids; the caller builds the probes.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentgrpo.agent.masking import IGNORE_INDEX, SFTExample
from agentgrpo.chat_content import content_text


def copied_values(messages: Sequence[dict[str, Any]]) -> list[str]:
    """String arguments of the assistant's tool calls that contain a digit and occur in an
    earlier user or tool message (in order, repeats kept: each call copies again)."""
    seen_text: list[str] = []
    values: list[str] = []
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            context = "\n".join(seen_text)
            for call in message.get("tool_calls") or []:
                arguments = (call.get("function") or call).get("arguments", {})
                if isinstance(arguments, str):
                    try:
                        arguments = json.loads(arguments)
                    except json.JSONDecodeError:
                        continue
                values += [v for v in _strings(arguments) if any(c.isdigit() for c in v) and v in context]
        elif role in ("user", "tool"):
            seen_text.append(content_text(message.get("content")))
    return values


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


@dataclass
class CopyProbe:
    """One tokenized demonstration and where its copied ids sit: ``spans`` are ``[start, end)``
    token ranges inside the labelled (assistant) tokens."""

    input_ids: list[int]
    spans: list[tuple[int, int]]


def find_copy_spans(example: SFTExample, value_ids: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """Token ranges of each copied value (in order) inside ``example``'s labelled tokens; a value
    whose tokens occur nowhere there (tokenized differently in context) is skipped."""
    labelled = [label != IGNORE_INDEX for label in example.labels]
    tokens = example.input_ids
    spans, cursor = [], 0
    for ids in value_ids:
        n = len(ids)
        for start in range(cursor, len(tokens) - n + 1):
            if all(labelled[start:start + n]) and tokens[start:start + n] == list(ids):
                spans.append((start, start + n))
                cursor = start + n
                break
    return spans


def copy_warmup_batch(pool: Sequence[int], length: int, batch_size: int, generator: torch.Generator,
                      bos_token_id: int, context: int = 0) -> torch.Tensor:
    """``batch_size`` rows ``[bos, c_1..c_context, s_1..s_length]`` of tokens drawn uniformly from
    ``pool`` (the tokens ids are made of), where ``s`` also occurs at a random place inside the
    ``context`` tokens (``context = 0``: the row is ``[bos, s, s]``). After its first token the
    final segment can only be predicted by finding where it began and copying on: the operation
    that continues an id read from a transcript. The segment hides among random tokens of the
    same kind at a random distance, so no fixed offset (a positional shortcut) does it: only a
    prefix match does, which is what an induction (copy) circuit learns. Random tokens, so
    nothing about any world's ids is learned but how to copy them."""
    pool_tensor = torch.as_tensor(list(pool), dtype=torch.long)
    segment = pool_tensor[torch.randint(len(pool_tensor), (batch_size, length), generator=generator)]
    rows = [torch.full((batch_size, 1), bos_token_id, dtype=torch.long)]
    if context:
        if context < length:
            raise ValueError(f"context ({context}) must hold the segment ({length} tokens)")
        filler = pool_tensor[torch.randint(len(pool_tensor), (batch_size, context), generator=generator)]
        starts = torch.randint(context - length + 1, (batch_size,), generator=generator)
        for row, start in enumerate(starts.tolist()):
            filler[row, start:start + length] = segment[row]
        rows.append(filler)
    else:
        rows.append(segment)
    return torch.cat([*rows, segment], dim=1)


def copy_warmup_loss(model: torch.nn.Module, sequences: torch.Tensor, length: int) -> torch.Tensor:
    """Mean next-token NLL on the final ``length``-token segment of ``copy_warmup_batch`` rows,
    after its first token (which nothing in the row predicts)."""
    logits = model(input_ids=sequences).logits[:, -length:-1]  # positions predicting s_2..s_length
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                             sequences[:, -length + 1:].reshape(-1))


@dataclass
class CopyScore:
    token_accuracy: float
    """Share of copied-id tokens that are the argmax next token (teacher-forced)."""
    id_accuracy: float
    """Share of copied ids whose every token is the argmax."""
    ids: int
    tokens: int
    first_accuracy: float = 0.0
    """Share of ids whose first token is right: choosing *which* id (the context holds many)."""
    continue_accuracy: float = 0.0
    """Share of the tokens after an id's first that are right, the prefix given: copying on
    from where the id was read. A model with an in-context copy circuit is near 1 here."""

    def as_metrics(self, prefix: str = "sft/copy_") -> dict[str, float]:
        return {f"{prefix}token_acc": self.token_accuracy, f"{prefix}id_acc": self.id_accuracy,
                f"{prefix}first_acc": self.first_accuracy, f"{prefix}continue_acc": self.continue_accuracy,
                f"{prefix}ids": float(self.ids)}


@torch.no_grad()
def copy_accuracy(model: torch.nn.Module, probes: Sequence[CopyProbe]) -> CopyScore:
    """Teacher-forced argmax accuracy at the copied ids of ``probes`` (one sequence per forward)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    right_tokens = total_tokens = right_ids = total_ids = right_first = right_rest = 0
    for probe in probes:
        if not probe.spans:
            continue
        end = max(stop for _, stop in probe.spans)
        input_ids = torch.tensor([probe.input_ids[:end]], device=device)
        predicted = model(input_ids=input_ids).logits[0].argmax(dim=-1)  # position t predicts token t+1
        target = input_ids[0]
        for start, stop in probe.spans:
            hits = (predicted[start - 1:stop - 1] == target[start:stop])
            right_tokens += int(hits.sum())
            total_tokens += stop - start
            right_ids += int(bool(hits.all()))
            right_first += int(hits[0])
            right_rest += int(hits[1:].sum())
            total_ids += 1
    if was_training:
        model.train()
    return CopyScore(token_accuracy=right_tokens / max(total_tokens, 1), id_accuracy=right_ids / max(total_ids, 1),
                     ids=total_ids, tokens=total_tokens, first_accuracy=right_first / max(total_ids, 1),
                     continue_accuracy=right_rest / max(total_tokens - total_ids, 1))
