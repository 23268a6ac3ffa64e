"""An agent played by a model behind an OpenAI-compatible endpoint (native tool calling).

Used by the evaluator for served models (vLLM, SGLang, hosted APIs). The system message
is the policy text; the tools go through the API's ``tools`` field; only the first tool
call of a message is executed (as τ-bench's tool-calling agent does).
"""
from __future__ import annotations

from typing import Any

from agentgrpo.agent.format import openai_assistant_message, parse_openai_message
from agentgrpo.envs.types import Action
from agentgrpo.openai_client import OpenAIChatPolicy


class EndpointAgent:
    """``act(observation) -> Action`` over a chat-completions API."""

    def __init__(self, domain: Any, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY",
                 temperature: float = 0.0, client: OpenAIChatPolicy | None = None):
        self.domain = domain
        self.tools = domain.tool_schemas()
        self.client = client or OpenAIChatPolicy(base_url, model, api_key_env=api_key_env)
        self.temperature = temperature
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": domain.policy}]
        self.last_text = ""
        self.last_error: str | None = None  # the parser's complaint about the last reply, shown to the model
        self._pending_call: dict[str, Any] | None = None
        self._calls = 0

    def act(self, observation: str) -> Action:
        if self._pending_call is not None:
            self.messages.append({"role": "tool", "tool_call_id": self._pending_call["id"],
                                  "name": self._pending_call["function"]["name"], "content": observation})
        else:
            self.messages.append({"role": "user", "content": observation})
        reply = self.client.complete(self.messages, tools=self.tools, temperature=self.temperature)
        parsed = parse_openai_message(reply, self.domain.tool_names)
        self.last_text = parsed.text
        self.last_error = parsed.error
        if parsed.kind == "respond":
            self._pending_call = None
            self.messages.append({"role": "assistant", "content": parsed.text})
            return Action.respond(parsed.text)
        if parsed.kind == "tool":
            message = openai_assistant_message(parsed, call_id=f"call_{self._calls}")
            self._calls += 1
            self._pending_call = message["tool_calls"][0]
            self.messages.append(message)
            return Action(parsed.name, parsed.arguments)
        # malformed: run_episode plays an invalid turn with ``last_error`` (it never reaches the env)
        self._pending_call = None
        self.messages.append({"role": "assistant", "content": reply.get("content") or ""})
        return Action(parsed.name or "invalid_tool_call", parsed.arguments or {})
