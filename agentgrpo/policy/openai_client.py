"""A policy served behind an OpenAI-compatible chat-completions API (evaluation only).

``OpenAIChatPolicy.complete(messages, tools)`` posts the transcript with native
``tools`` to ``<base_url>/v1/chat/completions`` over plain HTTP (``urllib``, no extra
dependency) and returns the assistant message (``content`` and/or ``tool_calls``).
Convert it with ``agentgrpo.agent.format.parse_openai_message`` (the action) and
``openai_assistant_message`` (the message to store: at most one call, as τ-bench keeps).

For a native-tools API the system message should be the policy text alone (the API
describes the tools to the model); ``ChatFormat.system_prompt`` is for our own template.

Connection errors, timeouts, HTTP 429 (and 408/409, which OpenAI also marks as
transient) and 5xx are retried with exponential backoff (``backoff * 2**attempt``
seconds, capped, or the server's ``Retry-After``); any other 4xx fails at once with the
server's message. The API key is read from the environment
variable ``api_key_env`` at each call; without it no ``Authorization`` header is sent
(local servers such as vLLM need none).
"""
from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

Message = dict[str, Any]
_RETRY_STATUS = frozenset({408, 409, 429})
_MAX_ERROR_BODY = 500


class OpenAIClientError(RuntimeError):
    """The API call failed for good (a 4xx, or retries exhausted); ``status`` if HTTP."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class OpenAIChatPolicy:
    """Chat-completions client; see the module docstring.

    Args:
        base_url: server root, with or without the trailing ``/v1``.
        model: the model name the server expects.
        api_key_env: environment variable holding the API key.
        max_retries: retries after the first attempt for retryable failures.
        backoff: first retry delay in seconds (doubles each retry, up to ``max_backoff``).
        timeout: seconds to wait for one HTTP response.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        max_retries: int = 5,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        timeout: float = 120.0,
    ):
        if max_retries < 0 or backoff < 0:
            raise ValueError("max_retries and backoff must be >= 0")
        root = base_url.rstrip("/")
        api_root = root if root.endswith("/v1") else f"{root}/v1"
        self.base_url = api_root
        self.url = f"{api_root}/chat/completions"
        self.model = model
        self.api_key_env = api_key_env
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.timeout = timeout

    def complete(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None,
                 temperature: float = 0.0, max_tokens: int | None = None, seed: int | None = None,
                 **extra: Any) -> Message:
        """One assistant turn for ``messages`` (OpenAI format); returns the assistant message."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": api_messages(messages),
            "temperature": temperature,
        }
        if tools:
            body["tools"] = list(tools)
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if seed is not None:
            body["seed"] = seed
        body.update(extra)
        response = self._post_with_retries(body)
        try:
            message = response["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            excerpt = str(response)[:_MAX_ERROR_BODY]
            raise OpenAIClientError(f"unexpected response from {self.url}: {excerpt}") from None
        out: Message = {"role": "assistant", "content": message.get("content")}
        if message.get("tool_calls"):
            out["tool_calls"] = message["tool_calls"]
        return out

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _post_with_retries(self, body: dict[str, Any]) -> Any:
        data = json.dumps(body).encode("utf-8")
        last_error = ""
        for attempt in range(self.max_retries + 1):
            request = urllib.request.Request(
                self.url, data=data, headers=self._headers(), method="POST"
            )
            retry_after: float | None = None
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                    return json.loads(reply.read().decode("utf-8"))
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode("utf-8", "replace")[:_MAX_ERROR_BODY]
                if exc.code < 500 and exc.code not in _RETRY_STATUS:
                    message = f"HTTP {exc.code} from {self.url}: {detail}"
                    raise OpenAIClientError(message, status=exc.code) from None
                last_error = f"HTTP {exc.code}: {detail}"
                retry_after = _retry_after_seconds(exc.headers.get("Retry-After"))
            except (TimeoutError, urllib.error.URLError, ConnectionError) as exc:
                last_error = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
            except json.JSONDecodeError as exc:
                message = f"{self.url} did not answer with JSON ({exc.msg})"
                raise OpenAIClientError(message) from None
            if attempt < self.max_retries:
                delay = min(self.backoff * 2**attempt, self.max_backoff)
                time.sleep(min(retry_after, self.max_backoff) if retry_after is not None else delay)
        raise OpenAIClientError(
            f"{self.url} failed after {self.max_retries + 1} attempts; last error: {last_error}"
        )


def llm_user_client(user: Any) -> OpenAIChatPolicy | None:
    """The chat client of an LLM user simulator (``env.user``: ``kind``, ``model``,
    ``base_url``, ``api_key_env``), or None for a scripted user: 60 s per request, network
    errors, 429 and 5xx retried 5 times with backoff from 1 s. One client serves every
    episode of a job."""
    if user.kind != "llm":
        return None
    return OpenAIChatPolicy(user.base_url, user.model, api_key_env=user.api_key_env, max_retries=5,
                            backoff=1.0, timeout=60.0)


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


def _retry_after_seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
