"""The server's request handling without HTTP: our Hermes format in, OpenAI ``tool_calls`` out."""
from __future__ import annotations

import json

import pytest

from agentgrpo.agent.format import parse_openai_message
from agentgrpo.policy.generate import Generation, GenerationRequest, generate_batch
from agentgrpo.policy.hf import load_policy
from agentgrpo.serve.app import RequestError, ServedModel

TOOL = {"type": "function", "function": {"name": "get_user_details", "description": "Look a user up.",
                                         "parameters": {"type": "object", "properties": {
                                             "user_id": {"type": "string"}}, "required": ["user_id"]}}}
CALL = {"id": "call_7", "type": "function",
        "function": {"name": "get_user_details", "arguments": '{"user_id": "mia_li_3668"}'}}


@pytest.fixture(scope="module")
def served(tiny_policy_dir):
    model, tokenizer = load_policy(tiny_policy_dir)
    served = ServedModel("tiny", model, tokenizer, prompt_style="full", max_new_tokens=8)
    yield served
    served.generator.close()


def test_history_renders_in_our_format_and_a_hermes_reply_becomes_tool_calls(served):
    history = [{"role": "system", "content": "You are an airline agent."},
               {"role": "user", "content": [{"type": "text", "text": "Hi, I am mia_li_3668."}]},
               {"role": "assistant", "content": None, "tool_calls": [CALL]},
               {"role": "tool", "tool_call_id": "call_7", "name": "get_user_details", "content": '{"name": "Mia"}'}]
    prepared = served.prepare({"model": "tiny", "messages": history, "tools": [TOOL], "temperature": 0})
    prompt = prepared.chat.decode(prepared.request.prompt)
    assert prompt.count("<tool_call>") >= 2  # the call format in the system prompt, and the call in the history
    assert '"user_id": "mia_li_3668"' in prompt and "You are an airline agent." in prompt and "Hi, I am" in prompt
    reply_text = 'I will look you up.\n<tool_call>\n{"name": "get_user_details", "arguments": {"user_id": "x_1"}}\n' \
                 "</tool_call>"
    tokens = prepared.chat.encode(reply_text)
    body = served.respond(prepared, Generation(tokens, "stop"))
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] == "I will look you up."
    [call] = message["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_user_details"
    assert json.loads(call["function"]["arguments"]) == {"user_id": "x_1"}
    parsed = parse_openai_message(message, {"get_user_details"})  # what our endpoint agent does with it
    assert (parsed.kind, parsed.arguments) == ("tool", {"user_id": "x_1"})
    assert body["usage"]["completion_tokens"] == len(tokens)


def test_without_tools_the_reply_is_plain_text(served):
    prepared = served.prepare({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 3})
    assert prepared.request.max_new_tokens == 3 and not prepared.parse_tools
    text = '<tool_call>\n{"name": "get_user_details", "arguments": {}}\n</tool_call>'
    message = served.respond(prepared, Generation(prepared.chat.encode(text), "stop"))["choices"][0]["message"]
    assert message == {"role": "assistant", "content": text}


USER = {"role": "user", "content": "x"}


@pytest.mark.parametrize("body, status, reason", [
    ({"messages": "hi"}, 400, "messages must be"), ({"messages": [USER], "temperature": -1}, 400, "temperature"),
    ({"messages": [USER], "temperature": float("nan")}, 400, "temperature"),
    ({"messages": [USER], "top_p": 0}, 400, "top_p"), ({"model": "gpt", "messages": [USER]}, 404, "'gpt'"),
    ({"messages": [USER], "max_tokens": 0}, 400, "max_tokens"), ({"messages": [USER], "n": 2}, 400, "n must be 1"),
    ({"messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0].role 'robot' is not one of"),
    ({"messages": [{"role": "user", "content": 7}]}, 400, "messages[0].content must be a string"),
    ({"messages": [{"role": "user", "content": None}]}, 400, "messages[0].content is required"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, 400,
     "messages[0].content[0] has type 'image_url'"),
    ({"messages": [USER, {"role": "assistant", "tool_calls": [{"function": {"name": 3}}]}]}, 400,
     "messages[1].tool_calls[0].function.name"),
    ({"messages": [{"role": "user", "content": "\ud800"}]}, 400, "lone surrogate"),  # json.loads makes these
    ({"messages": [USER], "tools": [{"type": "function", "function": {"description": "no name"}}]}, 400,
     "tools[0].function.name"),
    ({"messages": [USER], "tool_choice": "required", "tools": [TOOL]}, 400, "not supported"),
    ({"messages": [USER], "stream_options": {"include_usage": True}}, 400, "only allowed with stream=true"),
    ({"messages": [USER], "seed": 2**70}, 400, "seed"), ({"messages": [USER], "stop": [1]}, 400, "stop"),
    ({"messages": [USER], "logprobs": True}, 400, "logprobs"),
])
def test_bad_requests_are_refused_with_the_reason(served, body, status, reason):
    with pytest.raises(RequestError) as info:
        served.prepare(body)
    assert info.value.status == status and reason in str(info.value)


def test_developer_role_and_text_parts_are_accepted(served):
    prepared = served.prepare({"messages": [{"role": "developer", "content": "Be brief."},
                                            {"role": "user", "content": [{"type": "text", "text": "Hi"}]}]})
    assert "Be brief." in prepared.chat.decode(prepared.request.prompt)


def test_a_batch_decodes_each_row_like_it_would_alone(served):
    """Left-padded batch decoding: greedy rows match their solo decode; seeded rows repeat."""
    prompts = [served.prepare({"messages": [{"role": "user", "content": text}]}).request.prompt
               for text in ("Hi", "I would like to cancel my reservation please")]
    stop = served.prepare({"messages": [{"role": "user", "content": "x"}]}).request.stop_ids

    def request(prompt, temperature=0.0, seed=None):
        return GenerationRequest(prompt, 6, stop, temperature=temperature, seed=seed)

    model, pad = served.generator.model, served.generator.pad_token_id
    together = generate_batch(model, [request(p) for p in prompts], pad)
    alone = [generate_batch(model, [request(p)], pad)[0] for p in prompts]
    assert [g.tokens for g in together] == [g.tokens for g in alone]
    seeded = [generate_batch(model, [request(prompts[0], 1.0, 11)], pad)[0].tokens for _ in range(2)]
    assert seeded[0] == seeded[1]


def test_tiny_temperatures_sample_without_overflow(served):
    """T=1e-272 (found by the fuzz test) decodes greedily; T=1e-4 samples from finite probabilities."""
    prompt = served.prepare({"messages": [{"role": "user", "content": "Hi"}]}).request
    model, pad = served.generator.model, served.generator.pad_token_id

    def decode(temperature):
        request = GenerationRequest(prompt.prompt, 5, prompt.stop_ids, temperature=temperature, seed=3)
        return generate_batch(model, [request], pad)[0].tokens

    assert decode(1e-272) == decode(0.0)
    assert len(decode(1e-4)) > 0
