"""Hermes-style tool calls: render an assistant turn, and parse one back (never raising).

An assistant turn in our format is one of:

* a **tool call** — optional free text (the assistant's visible reasoning), then one block
  ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` and nothing after it;
* a **message to the user** (``respond``) — text without any block.

``parse_assistant`` turns raw generated text into a :class:`ParsedAction`. Anything
malformed (bad JSON, unknown tool, two blocks, a call followed by a message, stray
tags, empty output, ...) comes back as ``kind="invalid"`` with an ``error`` written for
the policy: the rollout shows it as the observation ``"Error: <error>"`` so the model
can recover, and the step counts in the error rate. It never raises.

``render_assistant`` is its exact inverse for well-formed turns: free text is stored
stripped of surrounding whitespace, and ``parse_assistant(render_assistant(t, n, a))``
gives back ``t.strip()``, ``n`` and ``a``.
"""
from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from agentgrpo.chat_content import content_text
from agentgrpo.envs.types import INVALID, RESPOND, Action, StepKind, error_observation

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"

END_OF_TURN_MARKERS: tuple[str, ...] = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>")
"""End-of-turn / end-of-text tokens that may trail decoded text; parsing ignores them."""


_MAX_QUOTED = 60  # characters of a bad name or stray text echoed back in an error


@dataclass
class ParsedAction:
    """What one assistant turn asks for.

    kind: ``tool`` (a well-formed call to a known tool), ``respond`` (a message to the
        user) or ``invalid`` (malformed; see ``error``).
    name: the tool name, ``"respond"``, or ``"invalid"``.
    arguments: the tool arguments; ``{"content": text}`` for respond; ``{}`` if invalid.
    text: the free text: the reasoning before a call, the message itself for respond,
        the whole (stripped) output for invalid turns.
    error: for invalid turns, what is wrong, phrased for the policy; else ``None``.
    """

    kind: StepKind
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    error: str | None = None

    @property
    def observation(self) -> str:
        """The error observation the policy sees for an invalid turn (``""`` otherwise),
        as the environment writes it (``agentgrpo.envs.types.error_observation``)."""
        return error_observation(self.error) if self.error is not None else ""

    def to_action(self) -> Action | None:
        """The environment action (``None`` for an invalid turn: it never reaches the env)."""
        if self.kind == "tool":
            return Action(self.name, dict(self.arguments))
        if self.kind == "respond":
            return Action.respond(self.text)
        return None


def strip_end_markers(text: str, markers: Collection[str] = END_OF_TURN_MARKERS) -> str:
    """Remove trailing end-of-turn markers and whitespace (in any order, repeatedly)."""
    previous = None
    while previous != text:
        previous = text
        text = text.rstrip()
        for marker in markers:
            if marker and text.endswith(marker):
                text = text[: -len(marker)]
    return text


def render_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """The Hermes block for one call (JSON with ``json.dumps`` defaults, UTF-8 kept).

    A tag inside a JSON string is written with ``\\u003c`` for its ``<`` (same JSON value),
    so the block's text holds exactly one pair of tags.
    """
    payload = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    for tag in (TOOL_CALL_OPEN, TOOL_CALL_CLOSE):
        payload = payload.replace(tag, "\\u003c" + tag[1:])
    return f"{TOOL_CALL_OPEN}\n{payload}\n{TOOL_CALL_CLOSE}"


def render_assistant(
    text: str, name: str | None = None, arguments: dict[str, Any] | None = None
) -> str:
    """Render an assistant turn: free text, then the tool-call block if ``name`` is given.

    ``text`` is stripped; with a call, non-empty text is followed by one newline.
    """
    text = text.strip()
    if name is None:
        return text
    block = render_tool_call(name, arguments if arguments is not None else {})
    return f"{text}\n{block}" if text else block


def parse_assistant(
    text: str,
    tool_names: Collection[str],
    end_markers: Collection[str] = END_OF_TURN_MARKERS,
) -> ParsedAction:
    """Parse one generated assistant turn; malformed turns become ``kind="invalid"``."""
    try:
        return _parse(text, tool_names, end_markers)
    except Exception as exc:  # noqa: BLE001 - the contract is "never raises"
        raw = text if isinstance(text, str) else ""
        return _invalid(raw, f"could not parse the output ({type(exc).__name__}).")


def _parse(text: str, tool_names: Collection[str], end_markers: Collection[str]) -> ParsedAction:
    body = strip_end_markers(text, end_markers).strip()
    if not body:
        return _invalid(body, "empty output. Write a message to the user, or call one tool with a "
                        f"{TOOL_CALL_OPEN} block.")
    opens, closes = body.count(TOOL_CALL_OPEN), body.count(TOOL_CALL_CLOSE)
    if opens == 0 and closes == 0:
        return ParsedAction("respond", RESPOND, {"content": body}, text=body)
    structural = _structure_error(body, opens, closes)
    if structural is not None:
        return _invalid(body, structural)
    start = body.index(TOOL_CALL_OPEN)
    end = body.index(TOOL_CALL_CLOSE)
    reasoning = body[:start].strip()
    inner = body[start + len(TOOL_CALL_OPEN) : end].strip()
    call, error = _decode_call(inner, tool_names)
    if error is not None:
        return _invalid(body, error)
    name, arguments = call
    return ParsedAction("tool", name, arguments, text=reasoning)


def _structure_error(body: str, opens: int, closes: int) -> str | None:
    """Problems with the tags themselves: count, order, and text after the block."""
    if opens > 1 or closes > 1:
        return (f"found {max(opens, closes)} {TOOL_CALL_OPEN} blocks; call exactly one tool "
                "per turn and wait for its result.")
    if closes == 0:
        return f"unclosed {TOOL_CALL_OPEN}: end the call with {TOOL_CALL_CLOSE}."
    if opens == 0:
        return f"stray {TOOL_CALL_CLOSE} without an opening {TOOL_CALL_OPEN}."
    end = body.index(TOOL_CALL_CLOSE)
    if end < body.index(TOOL_CALL_OPEN):
        return f"stray {TOOL_CALL_CLOSE} before {TOOL_CALL_OPEN}."
    after = body[end + len(TOOL_CALL_CLOSE) :].strip()
    if after:
        return (f"text after {TOOL_CALL_CLOSE} ({_quote(after)}): a turn is either one tool "
                "call or a message to the user, not both. Put reasoning before the call and "
                "send messages in a turn of their own.")
    return None


_Call = tuple[str, dict[str, Any]]


def _decode_call(inner: str, tool_names: Collection[str]) -> tuple[_Call, None] | tuple[None, str]:
    """Decode the JSON inside a block into ``(name, arguments)`` or an error message."""
    if not inner:
        expected = '{"name": ..., "arguments": {...}}'
        return None, f"empty {TOOL_CALL_OPEN} block; expected {expected}."
    try:
        payload = json.loads(inner)
    except (ValueError, RecursionError) as exc:
        detail = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
        return None, f"the tool call is not valid JSON ({detail})."
    if not isinstance(payload, dict):
        return None, (f'the tool call must be a JSON object {{"name": ..., "arguments": {{...}}}}, '
                      f"got a JSON {_json_type(payload)}.")
    extra = sorted(set(payload) - {"name", "arguments"})
    if extra:
        keys = ", ".join(map(repr, extra))
        return None, f"unexpected key(s) {keys} in the tool call; use only name and arguments."
    name = payload.get("name")
    if not isinstance(name, str) or not name:
        return None, 'the tool call needs a "name" that is a non-empty string.'
    if name not in tool_names:
        available = ", ".join(sorted(tool_names))
        return None, (f"unknown tool {_quote(name)}. Available tools: {available}. "
                      f"To talk to the user, reply without a {TOOL_CALL_OPEN} block.")
    arguments = payload.get("arguments", {})
    if isinstance(arguments, str):  # some models double-encode the arguments
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return None, f'"arguments" of {name} is a string that is not a JSON object.'
    if not isinstance(arguments, dict):
        got = _json_type(arguments)
        return None, f'"arguments" of {name} must be a JSON object, got a JSON {got}.'
    return (name, arguments), None


def _invalid(text: str, error: str) -> ParsedAction:
    return ParsedAction(INVALID, INVALID, {}, text=text, error=error)


def _json_type(value: Any) -> str:
    names = {list: "array", str: "string", bool: "boolean", int: "number", float: "number",
             type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _quote(text: str) -> str:
    return repr(text if len(text) <= _MAX_QUOTED else text[:_MAX_QUOTED] + "...")


# -- OpenAI chat-completions messages <-> our format ------------------------------------


def _function_of(tool_call: dict[str, Any]) -> tuple[Any, Any]:
    function = tool_call.get("function") if isinstance(tool_call, dict) else None
    if not isinstance(function, dict):
        return None, None
    return function.get("name"), function.get("arguments", {})


def _decoded_arguments(arguments: Any) -> Any:
    """OpenAI sends arguments as a JSON string; HF conventions use a dict. Accept both."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except (ValueError, RecursionError):
            return arguments
    return arguments


def openai_assistant_text(message: dict[str, Any]) -> str:
    """Our Hermes rendering of an OpenAI assistant message (content, then its calls).

    Content without calls is kept verbatim. Every call is rendered (one block each), so
    a message with parallel calls keeps all of them and parses as invalid in our
    one-call-per-turn format.
    """
    calls = message.get("tool_calls") or []
    if not calls:  # verbatim: the rollout's token stream holds exactly this text
        return content_text(message.get("content"))
    text = content_text(message.get("content")).strip()
    blocks = []
    for call in calls:
        name, arguments = _function_of(call)
        blocks.append(render_tool_call(name, _decoded_arguments(arguments)))
    return "\n".join(part for part in [text, *blocks] if part)


def parse_openai_message(message: dict[str, Any], tool_names: Collection[str]) -> ParsedAction:
    """The action of an assistant message from a chat-completions API (never raises).

    As τ-bench's tool-calling agent does, only the first of several tool calls counts
    (store ``openai_assistant_message(parsed)``, which carries just that call). Bad
    argument JSON or an unknown tool name makes the turn invalid.
    """
    try:
        calls = message.get("tool_calls") or []
        text = content_text(message.get("content")).strip()
        if not calls:
            if not text:
                return _invalid("", "empty output. Write a message to the user, or call one tool.")
            return ParsedAction("respond", RESPOND, {"content": text}, text=text)
        name, arguments = _function_of(calls[0])
        payload = json.dumps({"name": name, "arguments": _decoded_arguments(arguments)})
        call, error = _decode_call(payload, tool_names)
        if error is not None:
            return _invalid(text, error)
        return ParsedAction("tool", call[0], call[1], text=text)
    except Exception as exc:  # noqa: BLE001 - the contract is "never raises"
        return _invalid("", f"could not read the API message ({type(exc).__name__}).")


def openai_assistant_message(parsed: ParsedAction, call_id: str = "call_0") -> dict[str, Any]:
    """The canonical OpenAI assistant message of a parsed turn (one call at most).

    Invalid turns carry their raw text as content and no call.
    """
    if parsed.kind != "tool":
        return {"role": "assistant", "content": parsed.text}
    call = {
        "id": call_id,
        "type": "function",
        "function": {
            "name": parsed.name,
            "arguments": json.dumps(parsed.arguments, ensure_ascii=False),
        },
    }
    return {"role": "assistant", "content": parsed.text or None, "tool_calls": [call]}
