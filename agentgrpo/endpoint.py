"""How requests to an OpenAI-compatible server behave: deadline, retries, backoff, size cap.

``RequestConfig`` is the ``request`` section of every config that talks to a server
(``env.user.request`` for an LLM user, ``endpoint.request`` for an evaluated endpoint);
``agentgrpo.openai_client.OpenAIChatPolicy`` applies it. Plain settings: no HTTP,
no torch, so the environment package may import it.
"""
from __future__ import annotations

from dataclasses import dataclass

from agentgrpo.config import require


@dataclass
class RequestConfig:
    timeout: float = 120.0
    """Total deadline of one HTTP request in seconds: connecting, sending, waiting for and
    reading the answer all count, so a server that trickles bytes cannot stretch it."""
    max_retries: int = 5
    """Retries after the first attempt, for failures that may pass: network errors,
    deadlines, HTTP 408/409/429/5xx, and malformed or cut-off answers."""
    backoff: float = 1.0
    """Delay before the first retry in seconds, doubled at each retry (a server's Retry-After wins)."""
    max_backoff: float = 30.0
    """Longest delay between two attempts, in seconds."""
    max_response_bytes: int = 8 * 1024 * 1024
    """Answers larger than this are refused without being read further (a chat completion is a few KB)."""

    def __post_init__(self) -> None:
        require(self.timeout > 0, "request.timeout", self.timeout, "must be > 0 (seconds)")
        require(self.max_retries >= 0, "request.max_retries", self.max_retries, "must be >= 0")
        require(self.backoff >= 0, "request.backoff", self.backoff, "must be >= 0 (seconds)")
        require(self.max_backoff >= self.backoff, "request.max_backoff", self.max_backoff,
                f"must be >= request.backoff ({self.backoff})")
        require(self.max_response_bytes >= 1024, "request.max_response_bytes", self.max_response_bytes,
                "must be >= 1024")
