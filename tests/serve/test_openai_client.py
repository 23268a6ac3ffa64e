"""The official ``openai`` client against ``agentgrpo serve``'s app on 127.0.0.1: tool calls and streaming.

A random tiny model seldom writes a tool call, so the model here is a scripted one: a
torch module whose logits spell out a chosen reply, token by token, then the end of turn.
Everything else is the real server: the app on uvicorn, the batching generator, the
checkpoint's tokenizer and chat format, the Hermes parser and the SSE stream.
"""
from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import openai
import pytest
import torch
import uvicorn

from agentgrpo.agent.chat import ChatFormat
from agentgrpo.policy.hf import load_tokenizer
from agentgrpo.serve.app import ServedModel, create_app
from agentgrpo.serve.cli import bind

POLICY = "# Airline Agent Policy\n\nAs an airline agent, you can help users book, modify, or cancel reservations."
TOOL = {"type": "function", "function": {"name": "get_user_details", "description": "Look a user up.",
                                         "parameters": {"type": "object", "properties": {
                                             "user_id": {"type": "string"}}, "required": ["user_id"]}}}


class ScriptedModel(torch.nn.Module):
    """Logits that make greedy or sampled decoding write ``script`` (token ids), then repeat its last token."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.config = SimpleNamespace(max_position_embeddings=4096)
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # where the model lives
        self.vocab_size, self.script, self.step = vocab_size, [0], 0

    def forward(self, input_ids, logits_to_keep=None, **_):
        self.step = 0 if input_ids.shape[1] > 1 else self.step + 1  # a prefill starts the script
        logits = torch.full((input_ids.shape[0], input_ids.shape[1], self.vocab_size), -1e9)
        logits[:, :, self.script[min(self.step, len(self.script) - 1)]] = 0.0
        return SimpleNamespace(logits=logits)


@pytest.fixture(scope="module")
def scripted(tiny_policy_dir):
    tokenizer = load_tokenizer(tiny_policy_dir)
    model = ScriptedModel(len(tokenizer))
    served = ServedModel("scripted", model, tokenizer, prompt_style="compact", max_new_tokens=200)
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(create_app(served), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    chat = ChatFormat(tokenizer, [], "", system_prompt="")

    def reply(text: str) -> None:  # what the model writes next
        model.script = [*chat.encode(text), chat.end_of_turn_id]

    client = openai.OpenAI(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}/v1", api_key="unused",
                           max_retries=0, timeout=60)
    yield SimpleNamespace(client=client, reply=reply)
    server.should_exit = True
    thread.join(10)
    served.generator.close()


def call_block(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


TWO_CALLS = ("I will look that up for you.\n" + call_block("get_user_details", {"user_idd": "mia_li_3668"})
             + "\n" + call_block("cancel_everything", {"now": True}))


def ask(client, **extra):
    return client.chat.completions.create(model="scripted", messages=[
        {"role": "system", "content": POLICY}, {"role": "user", "content": "Hi, I am mia_li_3668."}],
        tools=[TOOL], temperature=0, **extra)


def test_every_well_formed_call_reaches_the_client_in_tool_calls(scripted):
    scripted.reply(TWO_CALLS)
    choice = ask(scripted.client).choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "I will look that up for you."
    calls = choice.message.tool_calls
    # a missing required argument and a tool not offered: both are the client's to answer
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("get_user_details", {"user_idd": "mia_li_3668"}), ("cancel_everything", {"now": True})]
    assert len({c.id for c in calls}) == 2 and all(c.type == "function" for c in calls)


def test_a_stream_carries_the_same_message_as_content_and_tool_call_deltas(scripted):
    scripted.reply(TWO_CALLS)
    chunks = list(ask(scripted.client, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    content_deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content_deltas) > 1 and "".join(content_deltas) == "I will look that up for you."
    calls: dict[int, dict] = {}
    for chunk in chunks:
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            call = calls.setdefault(delta.index, {"name": "", "arguments": ""})
            call["name"] += delta.function.name or ""
            call["arguments"] += delta.function.arguments or ""
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == [
        ("get_user_details", {"user_idd": "mia_li_3668"}), ("cancel_everything", {"now": True})]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["tool_calls"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 10
    # the SDK's own accumulator reads the stream into the non-streamed completion
    with scripted.client.chat.completions.stream(model="scripted", tools=[TOOL], temperature=0, messages=[
            {"role": "system", "content": POLICY}, {"role": "user", "content": "Hi"}]) as stream:
        final = stream.get_final_completion().choices[0]
    streamed = [(c.function.name, c.function.arguments) for c in final.message.tool_calls]
    assert streamed == [(c.function.name, c.function.arguments) for c in ask(scripted.client).choices[0].message
                        .tool_calls]


def test_a_plain_text_stream_stops_at_a_stop_string(scripted):
    scripted.reply("Your reservation is cancelled. Anything else? END and more words")
    text = "".join(c.choices[0].delta.content or "" for c in ask(scripted.client, stream=True, stop=["END"]))
    assert text == "Your reservation is cancelled. Anything else?"
    reply = ask(scripted.client, stop="END").choices[0]
    assert (reply.message.content, reply.finish_reason) == (text, "stop") and not reply.message.tool_calls


def test_a_malformed_call_comes_back_as_content_streamed_or_not(scripted):
    text = 'Checking. <tool_call>{"name": "get_user_details", "arguments": {</tool_call>'
    scripted.reply(text)
    assert ask(scripted.client).choices[0].message.content == text
    assert "".join(c.choices[0].delta.content or "" for c in ask(scripted.client, stream=True)) == text


def test_the_client_sees_a_refusal_as_bad_request(scripted):
    with pytest.raises(openai.BadRequestError, match="role 'robot'"):
        scripted.client.chat.completions.create(model="scripted", messages=[{"role": "robot", "content": "x"}])
    with pytest.raises(openai.NotFoundError):
        scripted.client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
