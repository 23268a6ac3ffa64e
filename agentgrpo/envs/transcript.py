"""The transcript of an episode: its turns as OpenAI-style chat messages, built in one place.

Every driver of episodes (the rollout engine, ``run_episode``, the veRL episode) and every
converter of chat messages (``agentgrpo.agent.chat.transcript_from_chat``, used by
``ChatFormat.openai_messages`` and TRL's reward) writes its transcript with
:class:`TranscriptBuilder`, from the turn's recorded ``Step``:

* a **tool call**: an assistant message with the step's text as ``content`` (``None`` when
  empty) and one ``tool_calls`` entry (id ``call_<k>``, k counting the calls so far, unless
  the caller names the id; arguments as JSON), answered by a ``tool`` message carrying that
  id and the tool name;
* a **message** to the user: an assistant message with the text, answered by a ``user``
  message (the user's reply);
* a **malformed** turn: an assistant message holding its raw text and no call, answered
  by a ``tool`` message without a call id (the error shown to the policy).

The final turn's answer is recorded too, even when the episode ended on that turn, so the
transcript holds every step's observation. ``agentgrpo.rewards.messages.parse_messages``
reads such a transcript back as exactly the recorded steps (kind, name, arguments,
observation, text, error flag): PRM-Lite scores a transcript and the steps it came from
the same. No torch, no chat format here.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from agentgrpo.envs.types import Step

Message = dict[str, Any]


class TranscriptBuilder:
    """Grows one transcript turn by turn; ``messages`` is the transcript so far.

    Args:
        opening: the messages before the first turn (system prompt, the user's first message).
    """

    def __init__(self, opening: Iterable[Mapping[str, Any]] = ()) -> None:
        self.messages: list[Message] = [dict(m) for m in opening]
        self._calls = 0                       # tool calls so far: the next call id
        self._pending: Message | None = None  # the call the next ``tool`` reply answers

    def add(self, step: Step, call_id: str | None = None) -> None:
        """Record one played turn: its assistant message and the answer (its observation).
        ``call_id``: the id of a tool call (default ``call_<calls so far>``)."""
        self.add_assistant(step, call_id)
        self.add_reply("user" if step.kind == "respond" else "tool", step.observation)

    def add_assistant(self, step: Step, call_id: str | None = None) -> None:
        """The assistant message of a turn (no answer yet): see the module docstring."""
        if step.kind != "tool":  # a message to the user, or a malformed turn's raw text
            self._append({"role": "assistant", "content": step.text}, calls=[])
            return
        call = {"id": call_id or f"call_{self._calls}", "type": "function",
                "function": {"name": step.name,
                             "arguments": json.dumps(step.arguments, ensure_ascii=False, default=str)}}
        self._append({"role": "assistant", "content": step.text or None, "tool_calls": [call]}, calls=[call])

    def add_message(self, message: Mapping[str, Any]) -> None:
        """An assistant message that already carries ``tool_calls``, kept as it is; the next
        ``tool`` reply answers its first call."""
        calls = list(message.get("tool_calls") or [])
        self._append(dict(message), calls=calls)

    def add_reply(self, role: str, content: str) -> None:
        """A message after the last assistant turn. A ``tool`` reply to a call carries the
        call's id and tool name; anything else is a plain role/content message."""
        pending, self._pending = self._pending, None
        if role == "tool" and pending is not None:
            function = pending.get("function") or {}
            self.messages.append({"role": "tool", "tool_call_id": pending.get("id"),
                                  "name": function.get("name"), "content": content})
        else:
            self.messages.append({"role": role, "content": content})

    def _append(self, message: Message, calls: list[Any]) -> None:
        self.messages.append(message)
        self._calls += len(calls)
        self._pending = calls[0] if calls and isinstance(calls[0], Mapping) else None


def opening_of(messages: Iterable[Mapping[str, Any]]) -> list[Message]:
    """The messages before the first assistant message (system prompt, first user message)."""
    opening = []
    for message in messages:
        if message.get("role") == "assistant":
            break
        opening.append(dict(message))
    return opening


def build_transcript(opening: Iterable[Mapping[str, Any]], steps: Iterable[Step]) -> list[Message]:
    """The transcript of an episode from its opening messages and recorded steps."""
    builder = TranscriptBuilder(opening)
    for step in steps:
        builder.add(step)
    return builder.messages


def first_reply_index(messages: Iterable[Mapping[str, Any]], tool_results: int = 1) -> int | None:
    """Index of the agent's first message to the user (an assistant message without a tool call)
    after the transcript's ``tool_results``-th tool result: where it shows what it made of the
    request, having read something (in the airline, with 1 the question after the profile, with 2
    what it says of the reservation it then read: a confirmation request, a refusal). None where
    there is none."""
    if tool_results < 1:
        raise ValueError(f"tool_results must be >= 1, got {tool_results}")
    seen = 0
    for index, message in enumerate(messages):
        if message.get("role") == "tool":
            seen += 1
        elif seen >= tool_results and message.get("role") == "assistant" and not message.get("tool_calls"):
            return index
    return None
