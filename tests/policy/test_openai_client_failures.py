"""Every way a server can fail a request becomes one ``OpenAIClientError``, within one deadline.

Real HTTP against ``tests/flaky_server.py`` on 127.0.0.1: refused and closed connections,
stalls and trickles past the deadline, bodies cut short, not UTF-8, not JSON, not shaped
like a completion, bad status lines, oversized answers; and content given as parts.
"""
from __future__ import annotations

import time

import pytest
from flaky_server import FlakyServer

from agentgrpo.config import EndpointError
from agentgrpo.envs.types import Task
from agentgrpo.envs.user_sim import LLMUser
from agentgrpo.openai_client import OpenAIChatPolicy, OpenAIClientError

HI = [{"role": "user", "content": "Hi"}]


def client(url: str, **kwargs) -> OpenAIChatPolicy:
    settings = {"max_retries": 0, "backoff": 0.01, "timeout": 1.0, **kwargs}
    return OpenAIChatPolicy(url, "flaky", **settings)


@pytest.mark.parametrize("behaviour, message", [
    ("500", "HTTP 500"), ("garbage", "did not answer with JSON"), ("badutf8", "not UTF-8"),
    ("wrongtype", "choices\\[0\\].message is not an object"), ("truncated", "RemoteProtocolError|ReadError"),
    ("badstatus", "RemoteProtocolError|ProtocolError"), ("close", "RemoteProtocolError|ReadError"),
    ("stall", "Timeout"),
])
def test_each_failure_is_one_retryable_error_type(behaviour, message):
    with FlakyServer(lambda n, body: behaviour) as server:
        start = time.perf_counter()
        with pytest.raises(OpenAIClientError, match=message) as info:
            client(server.url).complete(HI)
        elapsed = time.perf_counter() - start
    assert isinstance(info.value, EndpointError) and info.value.retryable
    assert elapsed < 2.5  # the stall is cut at the 1 s deadline


@pytest.mark.parametrize("behaviour", ["500", "garbage", "badutf8", "wrongtype", "truncated", "badstatus", "close",
                                       "stall"])
def test_each_failure_is_retried_then_succeeds(behaviour):
    with FlakyServer(lambda n, body: behaviour if n == 0 else "ok") as server:
        reply = client(server.url, max_retries=1).complete(HI)
    assert reply == {"role": "assistant", "content": "Goodbye."}
    assert server.behaviours == [behaviour, "ok"]


def test_the_deadline_is_total_not_per_read():
    # ~400 bytes at one byte per 50 ms: every read succeeds well within 1 s, the whole takes ~20 s
    with FlakyServer(lambda n, body: "trickle", trickle_s=0.05) as server:
        start = time.perf_counter()
        with pytest.raises(OpenAIClientError, match="Timeout"):
            client(server.url, timeout=1.0).complete(HI)
        elapsed = time.perf_counter() - start
    assert 0.9 < elapsed < 1.8


def test_an_oversized_answer_is_refused_without_retries():
    with FlakyServer(lambda n, body: "huge") as server:
        with pytest.raises(OpenAIClientError, match="answered too much") as info:
            client(server.url, max_retries=3, max_response_bytes=100_000).complete(HI)
    assert not info.value.retryable and len(server.bodies) == 1


def test_retries_exhausted_name_the_attempts_and_the_last_error():
    with FlakyServer(lambda n, body: ["500", "close", "garbage"][n]) as server:
        with pytest.raises(OpenAIClientError, match="failed after 3 attempts; last error: .*JSON"):
            client(server.url, max_retries=2).complete(HI)


def test_content_parts_are_joined_and_the_llm_user_reads_them():
    parts = [{"type": "text", "text": "I want to cancel "}, {"type": "image_url", "image_url": {"url": "x"}},
             {"type": "text", "text": "my trip."}]
    with FlakyServer(lambda n, body: "ok", answer=lambda body: {"role": "assistant", "content": parts}) as server:
        assert client(server.url).complete(HI)["content"] == "I want to cancel my trip."
        user = LLMUser(Task("t", "u", "Cancel your trip.", []), client(server.url), temperature=None)
        assert user.reset() == "I want to cancel my trip."
    assert "temperature" not in server.bodies[1]  # None: the server's default, as τ-bench's user sends


def test_the_llm_user_accepts_parts_from_any_chat_client():
    class PartsClient:
        base_url = "http://parts/v1"

        def complete(self, messages, *, temperature=0.0, seed=None):
            return {"role": "assistant", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "!"}]}

    assert LLMUser(Task("t", "u", "Say hello.", []), PartsClient()).reset() == "Hello!"


def test_list_models():
    with FlakyServer(lambda n, body: "ok") as server:
        assert client(server.url).list_models() == ["flaky"]
