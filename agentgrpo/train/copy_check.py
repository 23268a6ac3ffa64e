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
    return labelled_nll(model, sequences, copy_warmup_labels(sequences, length))


def copy_warmup_labels(sequences: torch.Tensor, length: int) -> torch.Tensor:
    """Where ``copy_warmup_batch`` rows are scored: their final ``length``-token segment after its first token."""
    labelled = torch.zeros_like(sequences, dtype=torch.bool)
    labelled[:, sequences.shape[1] - length + 1:] = True
    return labelled


def labelled_nll(model: torch.nn.Module, sequences: torch.Tensor, labelled: torch.Tensor) -> torch.Tensor:
    """Mean next-token NLL of the tokens where ``labelled`` (B, T) is true, each predicted from
    the tokens before it."""
    logits = model(input_ids=sequences).logits[:, :-1]
    targets = labelled[:, 1:]
    return torch.nn.functional.cross_entropy(logits[targets].float(), sequences[:, 1:][targets])


@dataclass(frozen=True)
class SlotRecallTokens:
    """The tokens ``slot_recall_batch`` builds rows of, one entry per id kind in ``slots`` and
    ``queries`` alike."""

    filler: list[int]
    """Tokens the rows are made of between mentions (the demonstrations' tokens but slots)."""
    slots: list[list[int]]
    """Each kind's slot tokens (``<R1>``, ``<R2>``, ...: one token each)."""
    queries: list[list[list[int]]]
    """Each kind's query contexts: the tokens that come right before a slot of that kind that an
    assistant tool call copies (``{"reservation_id": "``), as the demonstrations tokenize them."""

    def __post_init__(self) -> None:
        if not self.filler:
            raise ValueError("SlotRecallTokens needs filler tokens")
        if len(self.slots) != len(self.queries):
            raise ValueError(f"one query list per kind: {len(self.slots)} kinds, {len(self.queries)} query lists")
        if not any(slots and queries for slots, queries in zip(self.slots, self.queries)):
            raise ValueError("SlotRecallTokens needs a kind with slots and at least one query context")


def slot_recall_tokens(examples: Sequence[SFTExample], slots: list[list[int]],
                       query_tokens: int = 6) -> SlotRecallTokens:
    """``slot_recall_batch``'s tokens from rendered demonstrations: ``slots`` holds each kind's slot
    tokens; a query context is the (up to) ``query_tokens`` labelled tokens before a slot an
    assistant turn writes, cut after any earlier slot (the text that asks for this kind)."""
    kind_of = {token: kind for kind, tokens in enumerate(slots) for token in tokens}
    filler = sorted({t for e in examples for t in e.input_ids if t not in kind_of})
    contexts: list[set[tuple[int, ...]]] = [set() for _ in slots]
    for example in examples:
        ids, labels = example.input_ids, example.labels
        for p, token in enumerate(ids):
            if token not in kind_of or labels[p] == IGNORE_INDEX:
                continue
            start = p
            while start > max(0, p - query_tokens) and labels[start - 1] != IGNORE_INDEX \
                    and ids[start - 1] not in kind_of:
                start -= 1
            if start < p:
                contexts[kind_of[token]].add(tuple(ids[start:p]))
    return SlotRecallTokens(filler, [list(tokens) for tokens in slots],
                            [[list(c) for c in sorted(found)] for found in contexts])


def slot_recall_batch(tokens: SlotRecallTokens, context: int, queries: int, batch_size: int,
                      generator: torch.Generator, bos_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sequences, labelled)``, each (B, T): rows of ``context`` random filler tokens among which
    slots of random kinds are mentioned (one in twelve tokens, kinds and slot numbers uniform), and
    ``queries`` queries at random places after the first mention, each a query context of a kind
    mentioned before it followed by that kind's *latest* mention, the one labelled token. This is the choice a
    delexicalised transcript asks at every id argument: of the ``<R1>``, ``<R2>``, ... in context,
    the one the conversation is about now, usually the last one said. Numbers are uniform, so
    the usual slot (the user is ``<U1>``) predicts nothing; only a head that finds the last slot of
    the asked kind and copies it does. Rows are right-padded with filler (unlabelled)."""
    askable = [k for k, (slots, contexts) in enumerate(zip(tokens.slots, tokens.queries)) if slots and contexts]
    mentionable = [k for k, slots in enumerate(tokens.slots) if slots]
    mentions = max(1, context // 12)

    def draw(n: int) -> int:
        return int(torch.randint(n, (1,), generator=generator))

    rows: list[list[int]] = []
    labels: list[list[bool]] = []
    for _ in range(batch_size):
        filler = [tokens.filler[i] for i in torch.randint(len(tokens.filler), (context,), generator=generator).tolist()]
        mention_at = set(torch.randperm(context, generator=generator)[:mentions].tolist())
        first_mention = min(mention_at)
        # queries go after the first mention (something to recall), at random places
        query_at = sorted(first_mention + 1 + draw(context - first_mention) for _ in range(queries))
        row, labelled, latest = [bos_token_id], [False], {}
        q = 0
        for t in range(context + 1):
            while q < len(query_at) and query_at[q] == t:
                kinds = [k for k in askable if k in latest]
                if kinds:
                    kind = kinds[draw(len(kinds))]
                    contexts = tokens.queries[kind]
                    asked = contexts[draw(len(contexts))]
                    row += [*asked, latest[kind]]
                    labelled += [False] * len(asked) + [True]
                q += 1
            if t == context:
                break
            if t in mention_at:
                # the first mention is of a kind some query asks for, so every row has an answer
                kinds = askable if t == first_mention else mentionable
                kind = kinds[draw(len(kinds))]
                latest[kind] = tokens.slots[kind][draw(len(tokens.slots[kind]))]
                row.append(latest[kind])
            else:
                row.append(filler[t])
            labelled.append(False)
        rows.append(row)
        labels.append(labelled)
    width = max(len(row) for row in rows)
    pad = tokens.filler[0]
    sequences = torch.tensor([row + [pad] * (width - len(row)) for row in rows], dtype=torch.long)
    mask = torch.tensor([lab + [False] * (width - len(lab)) for lab in labels], dtype=torch.bool)
    return sequences, mask


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
