"""Render-Twice-Diff: which tokens of a rendered conversation the SFT loss trains on.

A chat template decides where an assistant turn starts and ends, and templates differ
(ChatML, Llama 3, templates that rewrite history...). Instead of searching the token
stream for marker tokens, we ask the template itself: for each assistant message i,

* ``render(messages[:i], generation_prompt=True)`` is everything before the turn, and
* ``render(messages[:i+1], generation_prompt=False)`` is everything up to its end,

so the tokens between the two are exactly the turn (free text, tool-call block and the
end-of-turn token). Anything the template writes after the end-of-turn token (ChatML's
newline) is dropped from the labels: generation stops at the end-of-turn, so the model
never produces that glue. Every other token — system, user, tool messages — gets label
``-100``.

The method assumes each prefix renders as a token prefix of the whole conversation. A
template for which that fails (one that drops earlier reasoning, say) cannot be
masked this way: the sample is rejected (``None``) and the caller counts it.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentgrpo.agent.chat import ChatFormat, Message

IGNORE_INDEX = -100


@dataclass
class SFTExample:
    """One training sequence: input_ids (T,) and labels (T,) with -100 where not trained."""

    input_ids: list[int]
    labels: list[int]
    weights: list[float] | None = None
    """Each token's weight in the loss (read where it is labelled); None: every labelled token 1."""

    @property
    def num_label_tokens(self) -> int:
        return sum(1 for label in self.labels if label != IGNORE_INDEX)

    def label_weights(self) -> list[float]:
        """Each token's weight in the loss: 0 where unlabelled, else its weight (default 1)."""
        weights = self.weights or [1.0] * len(self.labels)
        return [w if label != IGNORE_INDEX else 0.0 for w, label in zip(weights, self.labels)]

    def label_spans(self) -> list[tuple[int, int]]:
        """Maximal runs ``[start, end)`` of labelled tokens (one per assistant turn)."""
        spans, start = [], None
        for t, label in enumerate(self.labels):
            if label != IGNORE_INDEX and start is None:
                start = t
            elif label == IGNORE_INDEX and start is not None:
                spans.append((start, t))
                start = None
        if start is not None:
            spans.append((start, len(self.labels)))
        return spans


def build_sft_example(chat_format: ChatFormat, messages: Sequence[Message],
                      max_length: int | None = None) -> SFTExample | None:
    """Tokens and labels of one conversation (either message shape), or ``None`` if unusable.

    ``None`` when the template does not render prefixes consistently, when there is no
    assistant turn, or when truncation to ``max_length`` (from the end) leaves no label.
    """
    messages = list(messages)
    input_ids = chat_format.encode(chat_format.render(messages, add_generation_prompt=False))
    labels = [IGNORE_INDEX] * len(input_ids)
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        span = assistant_span(chat_format, messages, i, input_ids)
        if span is None:
            return None
        start, end = span
        labels[start:end] = input_ids[start:end]
    if max_length is not None:
        input_ids, labels = input_ids[:max_length], labels[:max_length]
    if all(label == IGNORE_INDEX for label in labels):
        return None
    return SFTExample(input_ids=input_ids, labels=labels)


def assistant_span(chat_format: ChatFormat, messages: list[Message], index: int,
                    full_ids: list[int]) -> tuple[int, int] | None:
    """``[start, end)`` of assistant message ``index`` in ``full_ids``, glue after it excluded."""
    before = chat_format.encode(chat_format.render(messages[:index], True))
    through = chat_format.encode(chat_format.render(messages[: index + 1], False))
    if not (_is_prefix(before, full_ids) and _is_prefix(through, full_ids)):
        return None
    if len(through) < len(before):
        return None
    start, end = len(before), len(through)
    span = full_ids[start:end]
    ends = [k for k, token in enumerate(span) if token == chat_format.end_of_turn_id]
    if ends:
        end = start + ends[-1] + 1
    return start, end


def _is_prefix(prefix: list[int], sequence: list[int]) -> bool:
    return len(prefix) <= len(sequence) and sequence[: len(prefix)] == prefix


def build_sft_examples(chat_format: ChatFormat, conversations: Sequence[Sequence[Message]],
                       max_length: int | None = None) -> tuple[list[SFTExample], int]:
    """``build_sft_example`` over many conversations: ``(examples, number rejected)``."""
    examples: list[SFTExample] = []
    rejected = 0
    for messages in conversations:
        example = build_sft_example(chat_format, messages, max_length=max_length)
        if example is None:
            rejected += 1
        else:
            examples.append(example)
    return examples, rejected

