"""Tool calls out of generated text, as vLLM's ``hermes`` tool parser returns them.

Every ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` block is a call (a last
block left unclosed counts if its JSON is whole); the content is the text before the first
block. A call naming a tool the request did not offer, or with arguments its schema does
not allow, is still returned: validation is the client's, which answers it with an error
the way our environment answers a bad call. If any block is not a JSON object with a
string ``name``, nothing is a call and the whole text is the content.

``streamable_prefix`` is the part of a growing text that a stream may already send as
content: never the start of a tool call, a stop string or an end-of-turn marker, never
trailing whitespace, so the streamed content always equals the final one.
"""
from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass

from agentgrpo.agent.format import TOOL_CALL_OPEN

_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str
    """The arguments as a JSON text (OpenAI's form)."""


def extract_tool_calls(text: str) -> tuple[str | None, list[ToolCall]]:
    """``(content, calls)``; ``calls`` is empty when the text holds no well-formed block."""
    start = text.find(TOOL_CALL_OPEN)
    if start < 0:
        return text, []
    calls = []
    for closed, unclosed in _BLOCK.findall(text):
        call = _decode(closed or unclosed)
        if call is None:
            return text, []
        calls.append(call)
    content = text[:start].rstrip()
    return content or None, calls


def _decode(block: str) -> ToolCall | None:
    try:
        payload = json.loads(block)
    except (ValueError, RecursionError):
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("name"), str) or not payload["name"]:
        return None
    arguments = payload.get("arguments", {})
    if isinstance(arguments, str):  # double-encoded by the model: keep the object it meant
        try:
            decoded = json.loads(arguments)
        except (ValueError, RecursionError):
            decoded = None
        arguments = decoded if isinstance(decoded, dict) else arguments
    return ToolCall(payload["name"], json.dumps(arguments, ensure_ascii=False))


def streamable_prefix(text: str, held_back: Collection[str], parse_tools: bool) -> str:
    """The prefix of ``text`` that no later token can turn into something else (see the module docstring).

    ``held_back``: strings that end or cut the content when they appear (stop strings,
    end-of-turn markers); text that may be their start waits.
    """
    markers = [m for m in held_back if m]
    if parse_tools:
        markers.append(TOOL_CALL_OPEN)
    cut = min((i for i in (text.find(m) for m in markers) if i >= 0), default=len(text))
    text = text[:cut]
    for marker in markers:  # a partial marker at the end may still complete
        for size in range(min(len(marker) - 1, len(text)), 0, -1):
            if text.endswith(marker[:size]):
                text = text[:-size]
                break
    return text.rstrip().rstrip("\ufffd")  # U+FFFD: a UTF-8 sequence whose next bytes are still to come
