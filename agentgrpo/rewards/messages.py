"""OpenAI-style chat transcripts -> PRM-Lite steps.

Accepted input: a list of messages (``system``, ``user``, ``assistant`` with optional
``content`` and ``tool_calls`` [{id, type, function: {name, arguments}}], ``tool``
with ``tool_call_id``/``name``/``content``); a τ-bench run result (a dict whose
``traj`` is such a list); a dict with ``messages``; or anything with a ``messages``
attribute (our ``Trajectory``).

Mapping (docs/prm_lite.md, "What is a step"):
- an assistant message with k tool calls gives k ``tool`` steps; its text goes on
  the first; each step's observation is the ``tool`` message answering its id
  (or, without ids, the next unanswered call in order);
- an assistant message without tool calls is a ``respond`` step whose observation
  is the user's next message(s);
- unparsable ``arguments`` (bad JSON, not an object) or a missing name give an
  ``invalid`` step (``error=True``), and so does an assistant message without calls
  that a ``tool`` message answers (a malformed turn kept as raw text, as
  ``agentgrpo.envs.transcript.TranscriptBuilder`` records one); a tool output that
  reports a failure sets ``error`` on its step. Our transcripts are judged by the
  environment's own rule (``agentgrpo.envs.types.is_error_observation``: the exact
  ``"Error: "`` prefix), so a transcript we recorded reads back as exactly its recorded
  steps; ``foreign=True`` (transcripts another program wrote, e.g. τ-bench result files)
  uses :func:`looks_like_error_text` instead;
- user messages before the first assistant message are the *opening*: the data
  chain may cite entities from them (the user often gives ids there).
"""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgrpo.chat_content import content_text
from agentgrpo.envs.types import Step, is_error_observation


@dataclass
class Conversation:
    """A transcript as PRM-Lite reads it.

    steps: the agent's actions in order.
    opening: user messages that came before the first assistant message.
    turn_of_step: index of the assistant message each step came from; steps of one
        message were generated together, so none of them saw the others' outputs.
    """

    steps: list[Step] = field(default_factory=list)
    opening: list[str] = field(default_factory=list)
    turn_of_step: list[int] = field(default_factory=list)


def _message_list(transcript: Any) -> Sequence[Any]:
    if isinstance(transcript, Mapping):
        for key in ("traj", "messages"):
            if key in transcript:
                return transcript[key]
        raise ValueError("expected a message list or a dict with 'traj' or 'messages'")
    if hasattr(transcript, "messages") and not isinstance(transcript, (list, tuple)):
        return transcript.messages
    return transcript


def _as_dict(message: Any) -> Mapping[str, Any]:
    if isinstance(message, Mapping):
        return message
    if hasattr(message, "model_dump"):
        return message.model_dump()
    raise TypeError(f"a chat message must be a mapping, got {type(message).__name__}")


def looks_like_error_text(observation: str) -> bool:
    """The tolerant error rule for transcripts that did not come from our environment:
    ``error:`` in any case after leading whitespace (``"  ERROR: ..."``, ``"error:..."``).

    Only ``parse_messages(..., foreign=True)`` uses it; our own episodes are judged by
    ``agentgrpo.envs.types.is_error_observation`` alone.
    """
    return observation.lstrip()[:6].lower() == "error:"


def _parse_arguments(raw: Any) -> dict[str, Any] | None:
    """Arguments as a dict, or None when they are not a JSON object."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    if isinstance(raw, Mapping):
        return dict(raw)
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except ValueError:
            return None
        return parsed if isinstance(parsed, dict) else None
    return None


def step_from_tool_call(call: Mapping[str, Any], text: str = "") -> Step:
    """One OpenAI ``tool_calls`` entry (or a flat ``{name, arguments}``) as a step."""
    function = call.get("function") if isinstance(call.get("function"), Mapping) else call
    name = function.get("name")
    arguments = _parse_arguments(function.get("arguments"))
    if not isinstance(name, str) or not name or arguments is None:
        return Step(kind="invalid", name="invalid", arguments={}, text=text, error=True)
    return Step(kind="tool", name=name, arguments=arguments, text=text)


class _Builder:
    """Walks the messages once, keeping track of calls that await their output."""

    def __init__(self, is_error: Callable[[str], bool]) -> None:
        self.is_error = is_error
        self.out = Conversation()
        self.pending: list[tuple[Any, int]] = []  # (tool_call_id, step index)
        self.respond_index: int | None = None     # respond step awaiting the user

    def add_assistant(self, message: Mapping[str, Any], turn: int) -> None:
        text = content_text(message.get("content"))
        calls = list(message.get("tool_calls") or [])
        if not calls and isinstance(message.get("function_call"), Mapping):
            calls = [{"function": message["function_call"]}]
        self.pending, self.respond_index = [], None
        if not calls:
            self._append(Step(kind="respond", name="respond", arguments={"content": text},
                              text=text), turn)
            self.respond_index = len(self.out.steps) - 1
            return
        for k, call in enumerate(calls):
            call = call if isinstance(call, Mapping) else {}
            self._append(step_from_tool_call(call, text if k == 0 else ""), turn)
            self.pending.append((call.get("id"), len(self.out.steps) - 1))

    def add_tool(self, message: Mapping[str, Any]) -> None:
        if not self.pending:
            self._tool_after_plain_message(message)
            return
        call_id = message.get("tool_call_id")
        slot = next((i for i, (cid, _) in enumerate(self.pending)
                     if call_id is not None and cid == call_id), 0)
        _, index = self.pending.pop(slot)
        step = self.out.steps[index]
        step.observation = content_text(message.get("content"))
        if step.kind == "tool":
            step.error = self.is_error(step.observation)

    def _tool_after_plain_message(self, message: Mapping[str, Any]) -> None:
        """A tool message can only answer a call; right after an assistant message with
        no call it is the error shown for a malformed turn (how ``ChatFormat`` records
        one), so that turn becomes an ``invalid`` step."""
        index = self.respond_index
        if index is None or self.out.steps[index].observation:
            return
        text = self.out.steps[index].text
        self.out.steps[index] = Step(kind="invalid", name="invalid", arguments={}, text=text,
                                     observation=content_text(message.get("content")), error=True)
        self.respond_index = None

    def add_user(self, message: Mapping[str, Any]) -> None:
        text = content_text(message.get("content"))
        if not self.out.steps:
            self.out.opening.append(text)
            return
        # After a respond step this is the user's reply; anywhere else it is still
        # something the agent saw after its last action, so it joins that observation.
        step = self.out.steps[self.respond_index if self.respond_index is not None else -1]
        step.observation = f"{step.observation}\n{text}" if step.observation else text

    def _append(self, step: Step, turn: int) -> None:
        self.out.steps.append(step)
        self.out.turn_of_step.append(turn)


def parse_messages(transcript: Any, foreign: bool = False) -> Conversation:
    """Steps, opening user messages and turn indices of a chat transcript.

    ``foreign``: the transcript was written by another program (not our environment), so
    a tool output counts as an error by :func:`looks_like_error_text`, not by the
    environment's exact ``"Error: "`` prefix.
    """
    builder = _Builder(looks_like_error_text if foreign else is_error_observation)
    turn = -1
    for raw in _message_list(transcript):
        message = _as_dict(raw)
        role = message.get("role")
        if role == "assistant":
            turn += 1
            builder.add_assistant(message, turn)
        elif role in ("tool", "function"):
            builder.add_tool(message)
        elif role == "user":
            builder.add_user(message)
    return builder.out


def opening_messages(transcript: Any) -> list[str]:
    """The user messages before the first assistant message (cheap: stops there)."""
    opening = []
    for raw in _message_list(transcript):
        message = _as_dict(raw)
        if message.get("role") == "assistant":
            break
        if message.get("role") == "user":
            opening.append(content_text(message.get("content")))
    return opening


def steps_from_messages(transcript: Any, foreign: bool = False) -> list[Step]:
    """The agent's steps in a chat transcript (see the module docstring)."""
    return parse_messages(transcript, foreign).steps
