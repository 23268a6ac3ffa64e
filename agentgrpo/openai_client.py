"""A chat-completions client for OpenAI-compatible servers (evaluated endpoints, LLM users).

``OpenAIChatPolicy.complete(messages, tools)`` posts the transcript with native ``tools``
to ``<base_url>/chat/completions`` (httpx, through ``agentgrpo.http_client``) and returns
the assistant message (``content`` as a string, and ``tool_calls`` if any). Convert it
with ``agentgrpo.agent.format.parse_openai_message`` (the action) and
``openai_assistant_message`` (the message to store: at most one call, as τ-bench keeps).

For a native-tools API the system message should be the policy text alone (the API
describes the tools to the model); ``ChatFormat.system_prompt`` is for our own template.

Each attempt has a total deadline (``timeout``: connect, send, wait and read together).
Failures that may pass are retried with exponential backoff (``backoff * 2**attempt``
seconds, capped, or the server's ``Retry-After``): network errors, deadlines, HTTP 408,
409, 429 and 5xx, and answers that are cut off, not UTF-8, not JSON or not shaped like a
chat completion. Any other 4xx and an answer over ``max_response_bytes`` fail at once.
Every failure is one exception type, :class:`OpenAIClientError` (an ``EndpointError``:
the command line prints it as one line); the evaluator marks the episode ``aborted``.
The API key is read from the environment variable ``api_key_env`` at each call; without
it no ``Authorization`` header is sent (local servers such as vLLM need none).
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from typing import Any

from agentgrpo.chat_content import content_text
from agentgrpo.config import EndpointError
from agentgrpo.endpoint import RequestConfig
from agentgrpo.http_client import TRANSPORT_ERRORS, Reply, TooLarge, exchange, make_client

Message = dict[str, Any]
_RETRY_STATUS = frozenset({408, 409, 429})
_MAX_ERROR_BODY = 300


class OpenAIClientError(EndpointError, RuntimeError):
    """A request failed for good (a 4xx, an oversized answer, or retries exhausted).

    status: the HTTP status if the server answered; retryable: whether another attempt
    might succeed (the client retries those itself before raising).
    """

    def __init__(self, message: str, status: int | None = None, retryable: bool = False,
                 retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after


class OpenAIChatPolicy:
    """Chat-completions client; see the module docstring.

    Args:
        base_url: server root, with or without the trailing ``/v1``.
        model: the model name the server expects.
        api_key_env: environment variable holding the API key.
        max_retries: retries after the first attempt for retryable failures.
        backoff: first retry delay in seconds (doubles each retry, up to ``max_backoff``).
        timeout: total deadline of one attempt in seconds.
        max_response_bytes: larger answers are refused.
        max_tokens: sent with every request unless a call gives its own (None: not sent).
    """

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", max_retries: int = 5,
                 backoff: float = 1.0, max_backoff: float = 30.0, timeout: float = 120.0,
                 max_response_bytes: int = 8 * 1024 * 1024, max_tokens: int | None = None):
        if max_retries < 0 or backoff < 0 or timeout <= 0:
            raise ValueError("max_retries and backoff must be >= 0, timeout > 0")
        root = base_url.rstrip("/")
        self.base_url = root if root.endswith("/v1") else f"{root}/v1"
        self.url = f"{self.base_url}/chat/completions"
        self.model = model
        self.api_key_env = api_key_env
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self.max_tokens = max_tokens
        self._http = make_client(self.base_url)

    @classmethod
    def from_config(cls, base_url: str, model: str, api_key_env: str, request: RequestConfig,
                    max_tokens: int | None = None) -> OpenAIChatPolicy:
        return cls(base_url, model, api_key_env=api_key_env, max_retries=request.max_retries,
                   backoff=request.backoff, max_backoff=request.max_backoff, timeout=request.timeout,
                   max_response_bytes=request.max_response_bytes, max_tokens=max_tokens)

    def complete(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None,
                 temperature: float | None = 0.0, max_tokens: int | None = None, seed: int | None = None,
                 **extra: Any) -> Message:
        """One assistant turn for ``messages`` (OpenAI format); returns the assistant message.

        ``temperature=None`` sends none (the server's default, as τ-bench's user does).
        """
        body: dict[str, Any] = {"model": self.model, "messages": api_messages(messages)}
        if temperature is not None:
            body["temperature"] = temperature
        if tools:
            body["tools"] = list(tools)
        limit = max_tokens if max_tokens is not None else self.max_tokens
        if limit is not None:
            body["max_tokens"] = limit
        if seed is not None:
            body["seed"] = seed
        body.update(extra)
        return self._with_retries(lambda: assistant_message(self._post(body), self.url))

    def list_models(self) -> list[str]:
        """The model ids the server lists at ``/models`` (one attempt)."""
        reply = self._send("GET", f"{self.base_url}/models", None)
        data = _json_of(reply, f"{self.base_url}/models").get("data")
        if not isinstance(data, list):
            raise OpenAIClientError(f"{self.base_url}/models answered without a list of models")
        return [str(m.get("id")) for m in data if isinstance(m, dict)]

    def close(self) -> None:
        self._http.close()

    # ---- one attempt ----------------------------------------------------------------
    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        return _json_of(self._send("POST", self.url, body), self.url)

    def _send(self, method: str, url: str, body: Any) -> Reply:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        try:
            reply = exchange(self._http, method, url, deadline_s=self.timeout, max_bytes=self.max_response_bytes,
                             json_body=body, headers=headers)
        except TooLarge as e:
            raise OpenAIClientError(f"{url} answered too much: {e}") from None
        except TRANSPORT_ERRORS as e:
            reason = " ".join(str(e).split()) or "no detail"
            raise OpenAIClientError(f"{type(e).__name__} ({reason})", retryable=True) from None
        if reply.status >= 400:
            detail = reply.body[:_MAX_ERROR_BODY].decode("utf-8", "replace")
            retryable = reply.status >= 500 or reply.status in _RETRY_STATUS
            raise OpenAIClientError(f"HTTP {reply.status} from {url}: {detail}", status=reply.status,
                                    retryable=retryable,
                                    retry_after=_retry_after_seconds(reply.headers.get("retry-after")))
        return reply

    def _with_retries(self, attempt: Any) -> Any:
        last: OpenAIClientError | None = None
        for number in range(self.max_retries + 1):
            try:
                return attempt()
            except OpenAIClientError as e:
                if not e.retryable:
                    raise
                last = e
            if number < self.max_retries:
                delay = min(self.backoff * 2**number, self.max_backoff)
                if last.retry_after is not None:
                    delay = min(last.retry_after, self.max_backoff)
                time.sleep(delay)
        assert last is not None
        attempts = f"{self.max_retries + 1} attempt" + ("s" if self.max_retries else "")
        raise OpenAIClientError(f"{self.url} failed after {attempts}; last error: {last}", status=last.status,
                                retryable=True)


def _json_of(reply: Reply, url: str) -> dict[str, Any]:
    try:
        data = json.loads(reply.body.decode("utf-8"))
    except UnicodeDecodeError:
        raise OpenAIClientError(f"{url} answered with bytes that are not UTF-8", retryable=True) from None
    except (ValueError, RecursionError) as e:
        raise OpenAIClientError(f"{url} did not answer with JSON ({e}): {_excerpt(reply.body)}",
                                retryable=True) from None
    if not isinstance(data, dict):
        raise OpenAIClientError(f"unexpected response from {url}: {_excerpt(reply.body)}", retryable=True)
    return data


def assistant_message(response: dict[str, Any], url: str = "the server") -> Message:
    """The assistant message of a chat completion, checked and normalised (content as a string).

    Anything not shaped like ``{"choices": [{"message": {"content": str | None | [parts],
    "tool_calls": [{"function": {"name": str, "arguments": str | object}}]}}]}`` raises a
    retryable ``OpenAIClientError``.
    """
    def bad(why: str) -> OpenAIClientError:
        return OpenAIClientError(f"unexpected response from {url} ({why}): {_excerpt(json.dumps(response))}",
                                 retryable=True)

    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise bad("no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise bad("choices[0].message is not an object")
    content = message.get("content")
    if isinstance(content, list):
        if not all(isinstance(p, dict) for p in content):
            raise bad("content parts are not objects")
        content = content_text(content)
    elif content is not None and not isinstance(content, str):
        raise bad("content is neither text, null nor a list of parts")
    out: Message = {"role": "assistant", "content": content}
    calls = message.get("tool_calls")
    if calls:
        if not isinstance(calls, list) or not all(_is_call(c) for c in calls):
            raise bad("tool_calls is malformed")
        out["tool_calls"] = calls
    return out


def _is_call(call: Any) -> bool:
    function = call.get("function") if isinstance(call, dict) else None
    return (isinstance(function, dict) and isinstance(function.get("name"), str)
            and isinstance(function.get("arguments", "{}"), (str, dict)))


def llm_user_client(user: Any) -> OpenAIChatPolicy | None:
    """The chat client of an LLM user simulator (``env.user``: ``kind``, ``model``,
    ``base_url``, ``api_key_env``, ``request``), or None for a scripted user. One client
    serves every episode of a job (and every thread)."""
    if user.kind != "llm":
        return None
    return OpenAIChatPolicy.from_config(user.base_url, user.model, user.api_key_env, user.request)


def api_messages(messages: Sequence[Message]) -> list[Message]:
    """The transcript as a chat-completions API accepts it.

    A tool message must answer a call of the assistant message before it; the error
    observation of a malformed turn answers none, so it is sent as a user message.
    """
    out: list[Message] = []
    open_calls: set[str] = set()
    for message in messages:
        if message.get("role") == "tool" and message.get("tool_call_id") not in open_calls:
            out.append({"role": "user", "content": message.get("content", "")})
            continue
        out.append(dict(message))
        if message.get("role") == "assistant":
            open_calls = {call.get("id") for call in message.get("tool_calls") or []}
        elif message.get("role") == "tool":
            open_calls.discard(message.get("tool_call_id"))
    return out


def _excerpt(body: bytes | str) -> str:
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    return " ".join(text[:_MAX_ERROR_BODY].split())


def _retry_after_seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
