"""PRM-Lite as a TRL reward function.

TRL calls each reward function as ``f(prompts=, completions=, completion_ids=, **columns)``
and sums their outputs with ``GRPOConfig.reward_weights``. ``PRMLiteReward`` returns
``coef · process_score`` per completion (default coef 0.3, the seed's weight), so adding
it to an outcome reward with unit weights gives the seed's ``outcome + 0.3 · PRM-Lite``.

Completions may be conversational (lists of messages: TRL's tool loop adds ``tool``
messages, and assistant turns may carry ``tool_calls`` or Hermes ``<tool_call>`` text)
or plain strings. Either way they become an OpenAI-style transcript — our Hermes text
parsed with ``agentgrpo.agent.format.parse_assistant`` and recorded by the one transcript
builder (``agentgrpo.agent.chat.transcript_from_chat``), a malformed turn kept as raw
text (PRM-Lite counts it as an invalid step) — and ``PRMLite.score_messages`` scores
the prompt's user messages plus the completion. Episodes of ``airline.AirlineRollout``
come with their own OpenAI-style ``transcript`` column, which is scored as it is.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from typing import Any

from agentgrpo.agent.chat import transcript_from_chat
from agentgrpo.agent.format import parse_assistant
from agentgrpo.envs.registry import DEFAULT_DOMAIN, get_domain
from agentgrpo.rewards import DEFAULT_PROCESS_COEF, PRMLite

Message = dict[str, Any]


def as_messages(value: Any, role: str) -> list[Message]:
    """A TRL prompt or completion as messages (a string becomes one ``role`` message)."""
    if isinstance(value, str):
        return [{"role": role, "content": value}]
    return [dict(message) for message in value]


def openai_transcript(messages: Sequence[Message], tool_names: Collection[str]) -> list[Message]:
    """Role/content messages (assistant turns as Hermes text) → the OpenAI-style transcript.

    ``agentgrpo.agent.chat.transcript_from_chat`` with ``parse_assistant`` over
    ``tool_names`` and the transcript builder every episode uses, so a turn reads back as the step
    the engine would have recorded for it.
    """
    return transcript_from_chat(messages, functools.partial(parse_assistant, tool_names=tool_names))


class PRMLiteReward:
    """TRL reward function: ``coef · PRM-Lite process score`` of each completion.

    Args:
        coef: weight of the process score (0.3 in the seed).
        tool_names: tools the parser accepts (default: ``domain``'s, the airline's 14).
        prm: the rule engine (default: the packaged airline configuration).
        domain: the ``env.domain`` whose tools are the default ``tool_names``.
    """

    def __init__(
        self,
        coef: float = DEFAULT_PROCESS_COEF,
        tool_names: Collection[str] | None = None,
        prm: PRMLite | None = None,
        domain: str = DEFAULT_DOMAIN,
    ) -> None:
        self.__name__ = "prm_lite"  # TRL names reward columns after __name__
        self.coef = float(coef)
        self.tool_names = frozenset(get_domain(domain).tool_names if tool_names is None else tool_names)
        self.prm = prm if prm is not None else PRMLite()

    def transcript(self, prompt: Any, completion: Any) -> list[Message]:
        """The OpenAI-style transcript PRM-Lite scores for one prompt/completion pair."""
        return openai_transcript(
            as_messages(prompt, "user") + as_messages(completion, "assistant"), self.tool_names
        )

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        completion_ids: Any = None,
        transcript: Sequence[Sequence[Message]] | None = None,
        **kwargs: Any,
    ) -> list[float]:
        if transcript is not None:  # whole episodes (AirlineRollout): the transcript is the trajectory
            transcripts = [list(t) for t in transcript]
        else:
            transcripts = [self.transcript(p, c) for p, c in zip(prompts, completions, strict=True)]
        return [self.coef * self.prm.score_messages(t).process_score for t in transcripts]
