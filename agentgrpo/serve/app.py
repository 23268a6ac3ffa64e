"""The OpenAI-compatible application: ``GET /v1/models``, ``POST /v1/chat/completions``, ``GET /health``.

A request's conversation is rendered exactly as the policy saw conversations in
training: its system message is the policy text, to which ``ChatFormat`` adds the
``tools`` in our Hermes format (the checkpoint's ``prompt_style``); assistant
``tool_calls`` in the history become ``<tool_call>`` blocks, ``tool`` results keep their
role. The reply is parsed back as vLLM's ``hermes`` parser does (serve/hermes.py): every
well-formed block becomes one of ``tool_calls`` (``finish_reason: tool_calls``), whether
or not its tool was offered or its arguments fit the schema; the client validates them.
Without ``tools`` (or with ``tool_choice: none``) the reply is plain text, e.g. for an
LLM user. ``stream: true`` answers with server-sent events as vLLM sends them: a first
chunk with the role, content deltas as tokens arrive, each tool call as a chunk with its
id and name and one with its arguments, a last chunk with ``finish_reason`` (then one
with ``usage`` if ``stream_options.include_usage``), and ``data: [DONE]``. A body vLLM
would refuse gets 400 with the reason (serve/request.py), never a 500.
"""
from __future__ import annotations

import asyncio
import json
import sys
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from agentgrpo.agent.chat import ChatFormat
from agentgrpo.agent.format import strip_end_markers
from agentgrpo.chat_content import content_text
from agentgrpo.policy.generate import Generation, GenerationRequest
from agentgrpo.serve.generate import BatchGenerator
from agentgrpo.serve.hermes import extract_tool_calls, streamable_prefix
from agentgrpo.serve.request import ChatRequest, RequestError, read_request

__all__ = ["Prepared", "RequestError", "ServedModel", "create_app"]


class TextWatcher:
    """Decodes a row as it grows (in the generator's thread): stops it at a stop string, publishes it to a stream."""

    def __init__(self, chat: ChatFormat, stop: list[str]):
        self.chat, self.stop = chat, stop
        self.publish: Callable[[str], None] | None = None

    def __call__(self, tokens: list[int]) -> bool:
        try:
            text = self.chat.decode(tokens)
            if self.publish is not None:
                self.publish(text)
            return any(s in text for s in self.stop)
        except Exception:  # noqa: BLE001 - a failing watcher must not fail the whole batch
            return False


@dataclass
class Prepared:
    """A validated request: its chat format, prompt and generation settings."""

    chat: ChatFormat
    request: GenerationRequest
    body: ChatRequest
    watcher: TextWatcher | None

    @property
    def parse_tools(self) -> bool:
        return self.body.parse_tools


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
        checked = read_request(body)
        if checked.model not in (None, self.name):
            raise RequestError(f"model {checked.model[:80]!r} is not served here; this server serves {self.name!r}",
                               status=404)
        messages, tools = checked.messages, checked.tools
        system = content_text(messages[0].get("content")) if messages[0]["role"] == "system" else None
        rest = messages[1:] if system is not None else messages
        chat = (ChatFormat(self.tokenizer, tools, system or "", prompt_style=self.prompt_style) if tools
                else ChatFormat(self.tokenizer, [], "", system_prompt=system or ""))
        conversation = ([{"role": "system", "content": chat.system_prompt}] if tools or system is not None else [])
        prompt = chat.encode_prompt(conversation + chat.chat_messages(rest))
        room = self.context - len(prompt) if self.context else self.max_new_tokens
        limit = min(checked.max_tokens or self.max_new_tokens, self.max_new_tokens)
        if checked.max_tokens is None:
            limit = min(limit, room)  # as vLLM: without max_tokens, what the context leaves
        if limit > room or limit < 1:
            raise RequestError(f"the prompt has {len(prompt)} tokens; with max_tokens={max(limit, 1)} it exceeds "
                               f"the model's context of {self.context}")
        watcher = TextWatcher(chat, checked.stop) if checked.stop or checked.stream else None
        request = GenerationRequest(prompt, limit, list(chat.eos_token_ids), checked.temperature, checked.top_p,
                                    checked.seed, on_token=watcher)
        return Prepared(chat, request, checked, watcher)

    def message(self, prepared: Prepared, generation: Generation) -> tuple[dict[str, Any], str]:
        """The assistant message of a finished generation and its finish reason."""
        chat, finish = prepared.chat, generation.finish_reason
        text = strip_end_markers(chat.decode(generation.tokens), (chat.end_of_turn,))
        cut = min((i for i in (text.find(s) for s in prepared.body.stop) if i >= 0), default=-1)
        if cut >= 0:  # the stop string and what follows it are not part of the reply
            text, finish = text[:cut].rstrip(), "stop"
        content, calls = extract_tool_calls(text) if prepared.parse_tools else (text, [])
        if not calls:
            return {"role": "assistant", "content": text}, finish
        tool_calls = [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                       "function": {"name": call.name, "arguments": call.arguments}} for call in calls]
        return {"role": "assistant", "content": content, "tool_calls": tool_calls}, "tool_calls"

    def usage(self, prepared: Prepared, generation: Generation) -> dict[str, int]:
        prompt_tokens, completion_tokens = len(prepared.request.prompt), len(generation.tokens)
        return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens}

    def respond(self, prepared: Prepared, generation: Generation) -> dict[str, Any]:
        """The chat-completion body of a finished generation."""
        message, finish = self.message(prepared, generation)
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": self.name, "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": self.usage(prepared, generation)}

    async def complete(self, prepared: Prepared) -> dict[str, Any]:
        generation = await asyncio.wrap_future(self.generator.submit(prepared.request))
        return self.respond(prepared, generation)

    async def stream(self, prepared: Prepared) -> AsyncIterator[str]:
        """Server-sent events of one completion (see the module docstring)."""
        loop = asyncio.get_running_loop()
        texts: asyncio.Queue[str | None] = asyncio.Queue()
        assert prepared.watcher is not None
        prepared.watcher.publish = lambda text: loop.call_soon_threadsafe(texts.put_nowait, text)
        future = asyncio.wrap_future(self.generator.submit(prepared.request))
        future.add_done_callback(lambda _: texts.put_nowait(None))  # after every published text
        chunk = _ChunkWriter(self.name)
        yield chunk({"role": "assistant", "content": ""})
        held = [*prepared.body.stop, prepared.chat.end_of_turn]
        sent = ""
        while (text := await texts.get()) is not None:
            safe = streamable_prefix(text, held, prepared.parse_tools)
            if len(safe) > len(sent) and safe.startswith(sent):
                yield chunk({"content": safe[len(sent):]})
                sent = safe
        try:
            generation = await future
        except Exception as e:  # noqa: BLE001 - the stream is open: report the failure in it
            yield _event({"error": {"message": f"generation failed: {type(e).__name__}: {e}",
                                    "type": "internal_server_error", "code": 500}})
            yield "data: [DONE]\n\n"
            return
        message, finish = self.message(prepared, generation)
        content = message["content"] or ""
        if len(content) > len(sent) and content.startswith(sent):
            yield chunk({"content": content[len(sent):]})
        for index, call in enumerate(message.get("tool_calls", [])):
            function = call["function"]
            yield chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                         "function": {"name": function["name"], "arguments": ""}}]})
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": function["arguments"]}}]})
        yield chunk({}, finish)
        if prepared.body.include_usage:
            yield _event({**chunk.head(), "choices": [], "usage": self.usage(prepared, generation)})
        yield "data: [DONE]\n\n"


class _ChunkWriter:
    """``chat.completion.chunk`` events sharing one id and creation time."""

    def __init__(self, model: str):
        self.id, self.created, self.model = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), model

    def head(self) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model}

    def __call__(self, delta: dict[str, Any], finish: str | None = None) -> str:
        return _event({**self.head(), "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                                   "finish_reason": finish}]})


def _event(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def create_app(served: ServedModel) -> FastAPI:
    """The FastAPI application serving ``served``."""
    app = FastAPI(title="agentgrpo serve", docs_url=None, redoc_url=None)

    def error(status: int, message: str) -> JSONResponse:
        kind = {404: "not_found_error", 500: "internal_server_error"}.get(status, "invalid_request_error")
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
            body = json.loads(await request.body())
        except (ValueError, RecursionError):
            return error(400, "the body is not valid JSON")
        try:
            prepared = served.prepare(body)
            if prepared.body.stream:
                return StreamingResponse(served.stream(prepared), media_type="text/event-stream")
            return await served.complete(prepared)
        except RequestError as e:
            return error(e.status, str(e))
        except Exception as e:  # noqa: BLE001 - a bug, not the client's: say so in JSON, keep serving
            traceback.print_exc(file=sys.stderr)
            return error(500, f"internal error: {type(e).__name__}: {e}")

    return app
