"""The OpenAI-compatible application: ``GET /v1/models``, ``POST /v1/chat/completions``, ``GET /health``.

A request's conversation is rendered exactly as the policy saw conversations in
training: its system message is the policy text, to which ``ChatFormat`` adds the
``tools`` in our Hermes format (the checkpoint's ``prompt_style``); assistant
``tool_calls`` in the history become ``<tool_call>`` blocks, ``tool`` results keep their
role. The reply is parsed back: one well-formed ``<tool_call>`` block becomes
``tool_calls`` (``finish_reason: tool_calls``), anything else is ``content`` (as vLLM's
``hermes`` parser does). Without ``tools`` the system message is used as it is and the
reply is plain text (e.g. an LLM user). Streaming and ``n > 1`` are refused with 400.
"""
from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agentgrpo.agent.chat import ChatFormat
from agentgrpo.agent.format import message_text, strip_end_markers
from agentgrpo.serve.generate import BatchGenerator, Generation, GenerationRequest


class RequestError(Exception):
    """A request the server refuses (HTTP ``status``, OpenAI-style error body)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass
class Prepared:
    """A validated request: its chat format, prompt and generation settings."""

    chat: ChatFormat
    request: GenerationRequest
    parse_tools: bool


class ServedModel:
    """A model, its tokenizer and batching generator, answering chat-completions bodies."""

    def __init__(self, name: str, model: Any, tokenizer: Any, prompt_style: str = "full",
                 max_new_tokens: int = 1024, max_batch: int = 8, use_autocast: bool = True):
        self.name = name
        self.tokenizer = tokenizer
        self.prompt_style = prompt_style
        self.max_new_tokens = max_new_tokens
        self.context = int(getattr(model.config, "max_position_embeddings", 0) or 0)
        plain = ChatFormat(tokenizer, [], "", system_prompt="")
        self.generator = BatchGenerator(model, plain.pad_token_id, max_batch=max_batch, use_autocast=use_autocast)
        self.created = int(time.time())

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.name, "object": "model", "created": self.created,
                                            "owned_by": "agentgrpo"}]}

    def prepare(self, body: Any) -> Prepared:
        """Check a request body and turn it into a generation request (raises ``RequestError``)."""
        if not isinstance(body, dict):
            raise RequestError("the body must be a JSON object")
        if body.get("model") not in (None, self.name):
            raise RequestError(f"model {body.get('model')!r} is not served here; this server serves {self.name!r}",
                               status=404)
        if body.get("stream"):
            raise RequestError("streaming is not supported by agentgrpo serve: send stream=false")
        if body.get("n", 1) != 1:
            raise RequestError("n must be 1")
        messages, tools = body.get("messages"), body.get("tools") or []
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
            raise RequestError("messages must be a non-empty list of objects with a role")
        if not isinstance(tools, list) or not all(isinstance(t, dict) and "name" in (t.get("function") or t)
                                                   for t in tools):
            raise RequestError("tools must be a list of function tools")
        system = message_text(messages[0].get("content")) if messages[0]["role"] == "system" else None
        rest = messages[1:] if system is not None else messages
        chat = (ChatFormat(self.tokenizer, tools, system or "", prompt_style=self.prompt_style) if tools
                else ChatFormat(self.tokenizer, [], "", system_prompt=system or ""))
        conversation = ([{"role": "system", "content": chat.system_prompt}] if tools or system is not None else [])
        prompt = chat.encode_prompt(conversation + chat.chat_messages(rest))
        limit = next((body[k] for k in ("max_completion_tokens", "max_tokens") if body.get(k) is not None),
                     self.max_new_tokens)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise RequestError("max_tokens must be a positive integer")
        limit = min(limit, self.max_new_tokens)
        if self.context and len(prompt) + limit > self.context:
            raise RequestError(f"the prompt has {len(prompt)} tokens; with max_tokens={limit} it exceeds the "
                               f"model's context of {self.context}")
        temperature, top_p, seed = body.get("temperature", 1.0), body.get("top_p", 1.0), body.get("seed")
        if not isinstance(temperature, (int, float)) or temperature < 0:
            raise RequestError("temperature must be a number >= 0")
        if not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
            raise RequestError("top_p must be in (0, 1]")
        if seed is not None and not isinstance(seed, int):
            raise RequestError("seed must be an integer")
        request = GenerationRequest(prompt, limit, list(chat.eos_token_ids), float(temperature), float(top_p), seed)
        return Prepared(chat, request, parse_tools=bool(tools) and body.get("tool_choice") != "none")

    def respond(self, prepared: Prepared, generation: Generation) -> dict[str, Any]:
        """The chat-completion body of a finished generation."""
        chat = prepared.chat
        text = strip_end_markers(chat.decode(generation.tokens), (chat.end_of_turn,))
        message: dict[str, Any] = {"role": "assistant", "content": text}
        finish = generation.finish_reason
        if prepared.parse_tools:
            parsed = chat.parse(text)
            if parsed.kind == "tool":
                call = {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                        "function": {"name": parsed.name, "arguments": json.dumps(parsed.arguments,
                                                                                  ensure_ascii=False)}}
                message = {"role": "assistant", "content": parsed.text or None, "tool_calls": [call]}
                finish = "tool_calls"
        prompt_tokens, completion_tokens = len(prepared.request.prompt), len(generation.tokens)
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": self.name, "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens}}

    async def complete(self, body: Any) -> dict[str, Any]:
        prepared = self.prepare(body)
        generation = await asyncio.wrap_future(self.generator.submit(prepared.request))
        return self.respond(prepared, generation)


def create_app(served: ServedModel) -> FastAPI:
    """The FastAPI application serving ``served``."""
    app = FastAPI(title="agentgrpo serve", docs_url=None, redoc_url=None)

    def error(status: int, message: str) -> JSONResponse:
        kind = "not_found_error" if status == 404 else "invalid_request_error"
        return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return served.models()

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        try:
            body = await request.json()
        except ValueError:
            return error(400, "the body is not valid JSON")
        try:
            return await served.complete(body)
        except RequestError as e:
            return error(e.status, str(e))

    return app
