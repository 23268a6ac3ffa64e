"""PRM-Lite as a TRL reward function.

TRL calls each reward function as ``f(prompts=, completions=, completion_ids=, **columns)``
and sums their outputs with ``GRPOConfig.reward_weights``. ``PRMLiteReward`` returns
``coef · process_score`` per completion (default coef 0.3, the seed's weight), so adding
it to an outcome reward with unit weights gives the seed's ``outcome + 0.3 · PRM-Lite``.

Completions may be conversational (lists of messages: TRL's tool loop adds ``tool``
messages, and assistant turns may carry ``tool_calls`` or Hermes ``<tool_call>`` text)
or plain strings. Either way they become an OpenAI-style transcript — our Hermes text
parsed with ``agentgrpo.agent.format.parse_assistant``, a malformed turn kept as raw
text (PRM-Lite counts it as an invalid step) — and ``PRMLite.score_messages`` scores
the prompt's user messages plus the completion. Episodes of ``airline.AirlineRollout``
come with their own OpenAI-style ``transcript`` column, which is scored as it is.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from agentgrpo.agent.format import message_text, openai_assistant_message, parse_assistant
from agentgrpo.envs.registry import DEFAULT_DOMAIN, get_domain
from agentgrpo.rewards import DEFAULT_PROCESS_COEF, PRMLite

Message = dict[str, Any]


def as_messages(value: Any, role: str) -> list[Message]:
    """A TRL prompt or completion as messages (a string becomes one ``role`` message)."""
    if isinstance(value, str):
        return [{"role": role, "content": value}]
    return [dict(message) for message in value]


def openai_transcript(messages: Sequence[Message], tool_names: Collection[str]) -> list[Message]:
    """Role/content messages (assistant turns as Hermes text) → OpenAI-style messages.

    Assistant turns that already carry ``tool_calls`` are kept; others are parsed: a call
    gets ``tool_calls`` (id ``call_<k>``) and the next ``tool`` message its id; a message
    to the user stays content; a malformed turn keeps its raw text.
    """
    transcript: list[Message] = []
    pending: Message | None = None  # the call the next tool message answers
    calls = 0
    for message in messages:
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            transcript.append(dict(message))
            pending = message["tool_calls"][0]
            calls += len(message["tool_calls"])
        elif role == "assistant":
            text = message_text(message.get("content"))
            parsed = parse_assistant(text, tool_names)
            out = (
                openai_assistant_message(parsed, call_id=f"call_{calls}")
                if parsed.kind != "invalid"
                else {"role": "assistant", "content": text}
            )
            transcript.append(out)
            pending = out["tool_calls"][0] if out.get("tool_calls") else None
            calls += 1 if pending else 0
        elif role == "tool" and pending is not None:
            transcript.append(
                {
                    "role": "tool",
                    "tool_call_id": pending.get("id"),
                    "name": pending["function"]["name"],
                    "content": message_text(message.get("content")),
                }
            )
            pending = None
        else:
            transcript.append({"role": role, "content": message_text(message.get("content"))})
            pending = None
    return transcript


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
