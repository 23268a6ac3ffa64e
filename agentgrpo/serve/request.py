"""A chat-completions request body checked field by field, as vLLM's OpenAI server checks it.

``read_request(body)`` returns a :class:`ChatRequest` or raises :class:`RequestError` with a
reason naming the field (``messages[2].role``, ``tools[0].function.name``, ``temperature``),
which the app answers with HTTP 400. Every value the server goes on to use is checked here,
so no malformed body reaches the tokenizer or the sampler (no 500s). What a text-only model
served this way cannot do (images, ``n > 1``, log-probs, forced tool choice, JSON mode) is
refused with a reason too; unknown fields are ignored, as vLLM and OpenAI ignore them.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

ROLES = ("system", "developer", "user", "assistant", "tool")
INT64 = (-(2**63), 2**63 - 1)


class RequestError(Exception):
    """A request the server refuses (HTTP ``status``, OpenAI-style error body)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass
class ChatRequest:
    """A valid request: OpenAI messages and tools (checked shapes), and how to sample."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    model: str | None = None
    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    parse_tools: bool = True
    """False with ``tool_choice: none``: the reply is plain text even if it holds a call."""


def read_request(body: Any) -> ChatRequest:
    """Check a decoded JSON body (see the module docstring); raises ``RequestError``."""
    _check(isinstance(body, dict), "the body must be a JSON object")
    _check_unicode(body)
    model = body.get("model")
    _check(model is None or isinstance(model, str), "model must be a string")
    messages = body.get("messages")
    _check(isinstance(messages, list) and len(messages) > 0, "messages must be a non-empty list of messages")
    checked = [_message(m, f"messages[{i}]") for i, m in enumerate(messages)]
    tools = body.get("tools")
    _check(tools is None or isinstance(tools, list), "tools must be a list of function tools")
    tools = [_tool(t, f"tools[{i}]") for i, t in enumerate(tools or [])]
    stream = _optional(body, "stream", bool, "a boolean") or False
    options = body.get("stream_options")
    _check(options is None or isinstance(options, dict), "stream_options must be an object")
    _check(options is None or stream, "stream_options is only allowed with stream=true")
    include_usage = _optional(options or {}, "include_usage", bool, "a boolean", "stream_options.") or False
    _refuse_unsupported(body)
    return ChatRequest(checked, tools, model=model, max_tokens=_max_tokens(body),
                       temperature=_number(body, "temperature", 1.0, lambda v: v >= 0, "a number >= 0"),
                       top_p=_number(body, "top_p", 1.0, lambda v: 0 < v <= 1, "a number in (0, 1]"),
                       seed=_seed(body), stop=_stop(body.get("stop")), stream=stream,
                       include_usage=include_usage, parse_tools=bool(tools) and _tool_choice(body) != "none")


def _check(ok: bool, reason: str) -> None:
    if not ok:
        raise RequestError(reason)


def _check_unicode(body: dict[str, Any]) -> None:
    """JSON may carry lone surrogates (``"\\ud800"``) that no tokenizer can encode: refuse them."""
    try:
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise RequestError("the body holds a string that is not valid Unicode (a lone surrogate escape such as "
                           "\\ud800)") from None
    except (ValueError, RecursionError):  # NaN is checked where a number is read; nesting depth here
        raise RequestError("the body is nested too deeply") from None


def _optional(mapping: dict[str, Any], key: str, kind: type, what: str, prefix: str = "") -> Any:
    value = mapping.get(key)
    _check(value is None or isinstance(value, kind), f"{prefix}{key} must be {what}")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _message(message: Any, where: str) -> dict[str, Any]:
    _check(isinstance(message, dict), f"{where} must be an object with a role")
    role = message.get("role")
    _check(isinstance(role, str), f"{where}.role must be a string")
    _check(role in ROLES, f"{where}.role {role[:40]!r} is not one of {', '.join(ROLES)}")
    content = message.get("content")
    if content is None:
        _check(role == "assistant", f"{where}.content is required for a {role} message")
    elif isinstance(content, list):
        for j, part in enumerate(content):
            _check(isinstance(part, dict), f"{where}.content[{j}] must be a content part object")
            kind = part.get("type", "text")
            _check(kind == "text", f"{where}.content[{j}] has type {str(kind)[:40]!r}: this server takes text only")
            _check(isinstance(part.get("text"), str), f"{where}.content[{j}].text must be a string")
    else:
        _check(isinstance(content, str), f"{where}.content must be a string or a list of text parts")
    for key in ("name", "tool_call_id"):
        _optional(message, key, str, "a string", f"{where}.")
    calls = message.get("tool_calls")
    if calls is not None:
        _check(role == "assistant", f"{where}.tool_calls is only allowed on an assistant message")
        _check(isinstance(calls, list), f"{where}.tool_calls must be a list")
        for j, call in enumerate(calls):
            _tool_call(call, f"{where}.tool_calls[{j}]")
    # developer is OpenAI's newer name for system; our templates know system
    return {**message, "role": "system"} if role == "developer" else message


def _tool_call(call: Any, where: str) -> None:
    _check(isinstance(call, dict), f"{where} must be an object")
    _check(call.get("type", "function") == "function", f"{where}.type must be 'function'")
    _optional(call, "id", str, "a string", f"{where}.")
    function = call.get("function")
    _check(isinstance(function, dict), f"{where}.function must be an object with name and arguments")
    _check(isinstance(function.get("name"), str), f"{where}.function.name must be a string")
    arguments = function.get("arguments")
    _check(arguments is None or isinstance(arguments, (str, dict)),
           f"{where}.function.arguments must be a JSON string")


def _tool(tool: Any, where: str) -> dict[str, Any]:
    _check(isinstance(tool, dict), f"{where} must be an object {{'type': 'function', 'function': {{...}}}}")
    _check(tool.get("type", "function") == "function", f"{where}.type must be 'function'")
    function = tool.get("function")
    _check(isinstance(function, dict), f"{where}.function must be an object with a name")
    name = function.get("name")
    _check(isinstance(name, str) and bool(name), f"{where}.function.name must be a non-empty string")
    _optional(function, "description", str, "a string", f"{where}.function.")
    parameters = function.get("parameters")
    _check(parameters is None or isinstance(parameters, dict), f"{where}.function.parameters must be an object")
    properties = (parameters or {}).get("properties")
    _check(properties is None or isinstance(properties, dict),
           f"{where}.function.parameters.properties must be an object")
    return {"type": "function", "function": function}


def _tool_choice(body: dict[str, Any]) -> str:
    choice = body.get("tool_choice")
    if choice is None:
        return "auto"
    if choice in ("auto", "none"):
        return choice
    _check(choice != "required" and not isinstance(choice, dict),
           "tool_choice 'required' or a named function is not supported by agentgrpo serve (decoding is not "
           "constrained): use 'auto' or 'none'")
    raise RequestError("tool_choice must be 'auto' or 'none'")


def _max_tokens(body: dict[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if value is not None:
            _check(isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                   f"{key} must be a positive integer")
            return value
    return None


def _number(body: dict[str, Any], key: str, default: float, ok: Any, what: str) -> float:
    value = body.get(key)
    if value is None:
        return default
    _check(_is_number(value) and math.isfinite(value) and ok(value), f"{key} must be {what}")
    return float(value)


def _seed(body: dict[str, Any]) -> int | None:
    seed = body.get("seed")
    _check(seed is None or isinstance(seed, int) and not isinstance(seed, bool) and INT64[0] <= seed <= INT64[1],
           "seed must be a 64-bit integer")
    return seed


def _stop(stop: Any) -> list[str]:
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    _check(isinstance(stop, list) and all(isinstance(s, str) for s in stop),
           "stop must be a string or a list of strings")
    return [s for s in stop if s]


def _refuse_unsupported(body: dict[str, Any]) -> None:
    n = body.get("n")
    _check(n is None or isinstance(n, int) and not isinstance(n, bool) and n >= 1, "n must be a positive integer")
    _check(n in (None, 1), "n must be 1: agentgrpo serve returns one choice (send n requests)")
    _check(not body.get("logprobs") and body.get("top_logprobs") is None,
           "logprobs are not supported by agentgrpo serve")
    response_format = body.get("response_format")
    _check(response_format is None or response_format == {"type": "text"},
           "response_format other than {'type': 'text'} is not supported by agentgrpo serve")
    for key in ("presence_penalty", "frequency_penalty"):
        value = body.get(key)
        _check(value is None or _is_number(value) and math.isfinite(value) and -2 <= value <= 2,
               f"{key} must be a number in [-2, 2]")
        _check(not value, f"{key} is not supported by agentgrpo serve: send 0 or leave it out")
