"""The chat-completions client against a real HTTP server on 127.0.0.1 (canned answers; failure modes in
test_openai_client_failures.py)."""
from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentgrpo.agent.format import openai_assistant_message, parse_openai_message
from agentgrpo.openai_client import OpenAIChatPolicy, OpenAIClientError, api_messages

TOOLS = [{"type": "function", "function": {"name": "get_user_details", "description": "Look a user up.",
                                           "parameters": {"type": "object", "properties": {
                                               "user_id": {"type": "string"}}, "required": ["user_id"]}}}]
CALL = {"id": "call_9", "type": "function",
        "function": {"name": "get_user_details", "arguments": '{"user_id": "mia_li_3668"}'}}


def completion(message: dict) -> dict:
    return {"id": "cmpl-1", "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


class CannedServer:
    """Answers POSTs with the queued (status, body, headers) in order and records each request."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                status, payload, headers = server.replies.pop(0)
                data = json.dumps(payload).encode() if not isinstance(payload, bytes) else payload
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def client(url, **kwargs):
    return OpenAIChatPolicy(url, "served-model", api_key_env="AGENTGRPO_TEST_KEY", backoff=0.01, **kwargs)


def test_tool_call_reply_and_request_format(monkeypatch):
    monkeypatch.setenv("AGENTGRPO_TEST_KEY", "sk-test")
    messages = [{"role": "system", "content": "Policy."}, {"role": "user", "content": "Hi, I'm mia_li_3668."}]
    with CannedServer([(200, completion({"role": "assistant", "content": None, "tool_calls": [CALL]}), {})]) as server:
        reply = client(server.url + "/v1/").complete(messages, TOOLS, temperature=0.0, max_tokens=64, seed=7)
    assert reply == {"role": "assistant", "content": None, "tool_calls": [CALL]}
    request = server.requests[0]
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == "Bearer sk-test"
    assert request["body"] == {"model": "served-model", "messages": messages, "temperature": 0.0,
                               "tools": TOOLS, "max_tokens": 64, "seed": 7}
    parsed = parse_openai_message(reply, {"get_user_details"})
    assert (parsed.kind, parsed.name, parsed.arguments) == ("tool", "get_user_details", {"user_id": "mia_li_3668"})
    assert openai_assistant_message(parsed, "call_9") == {"role": "assistant", "content": None, "tool_calls": [CALL]}


def test_no_key_means_no_authorization_header(monkeypatch):
    monkeypatch.delenv("AGENTGRPO_TEST_KEY", raising=False)
    with CannedServer([(200, completion({"role": "assistant", "content": "Hello!"}), {})]) as server:
        reply = client(server.url).complete([{"role": "user", "content": "Hi"}])
    assert reply == {"role": "assistant", "content": "Hello!"}
    assert "Authorization" not in server.requests[0]["headers"]
    assert "tools" not in server.requests[0]["body"]


def test_503_then_200_is_retried():
    replies = [(503, {"error": "overloaded"}, {}), (200, completion({"role": "assistant", "content": "ok"}), {})]
    with CannedServer(replies) as server:
        reply = client(server.url, max_retries=3).complete([{"role": "user", "content": "Hi"}])
    assert reply["content"] == "ok" and len(server.requests) == 2


def test_429_honours_retry_after_then_gives_up():
    replies = [(429, {"error": "slow down"}, {"Retry-After": "0.2"})] * 3
    with CannedServer(replies) as server:
        start = time.perf_counter()
        with pytest.raises(OpenAIClientError, match="after 3 attempts.*HTTP 429"):
            client(server.url, max_retries=2).complete([{"role": "user", "content": "Hi"}])
        elapsed = time.perf_counter() - start
    assert len(server.requests) == 3
    assert 0.4 <= elapsed < 5  # two waits of Retry-After 0.2 s, not the 0.01 s backoff


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_client_errors_fail_at_once_with_the_server_message(status):
    with CannedServer([(status, {"error": {"message": "model not found"}}, {})]) as server:
        with pytest.raises(OpenAIClientError, match=f"HTTP {status}.*model not found") as info:
            client(server.url).complete([{"role": "user", "content": "Hi"}])
    assert info.value.status == status and len(server.requests) == 1


def test_connection_refused_is_retried_then_reported():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(OpenAIClientError, match="failed after 3 attempts.*ConnectError"):
        client(f"http://127.0.0.1:{port}", max_retries=2).complete([{"role": "user", "content": "Hi"}])


def test_malformed_reply_is_reported():
    with CannedServer([(200, {"choices": []}, {}), (200, b"not json", {})]) as server:
        with pytest.raises(OpenAIClientError, match="unexpected response"):
            client(server.url, max_retries=0).complete([{"role": "user", "content": "Hi"}])
        with pytest.raises(OpenAIClientError, match="did not answer with JSON"):
            client(server.url, max_retries=0).complete([{"role": "user", "content": "Hi"}])


def test_malformed_reply_is_retried_like_a_transient_failure():
    replies = [(200, b"garbage", {}), (200, completion({"role": "assistant", "content": "ok"}), {})]
    with CannedServer(replies) as server:
        reply = client(server.url, max_retries=1).complete([{"role": "user", "content": "Hi"}])
    assert reply["content"] == "ok" and len(server.requests) == 2


def test_error_observation_of_a_malformed_turn_is_sent_as_a_user_message():
    transcript = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<tool_call>{bad</tool_call>"},
        {"role": "tool", "content": "Error: the tool call is not valid JSON"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_9", "name": "get_user_details", "content": "{}"},
    ]
    sent = api_messages(transcript)
    assert sent[2] == {"role": "user", "content": "Error: the tool call is not valid JSON"}
    assert sent[:2] == transcript[:2] and sent[3:] == transcript[3:]
