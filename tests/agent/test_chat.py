"""ChatFormat on the domain tokenizer: system prompt, rendering, conversions, delta encoding."""
from __future__ import annotations

import json

import pytest

from agentgrpo.agent.chat import ChatFormat, build_system_prompt
from agentgrpo.agent.format import render_assistant

from .conftest import gold_transcript

LOOKUP = {"role": "assistant", "content": "I will look you up.", "tool_calls": [
    {"id": "call_0", "type": "function",
     "function": {"name": "get_user_details", "arguments": '{"user_id": "mia_li_3668"}'}}]}


def test_system_prompt_holds_policy_schemas_and_call_format(domain, chat_format):
    prompt = chat_format.system_prompt
    assert prompt.startswith(domain.policy.strip())
    inside = prompt[prompt.index("<tools>\n") + len("<tools>\n"): prompt.index("\n</tools>")]
    schemas = [json.loads(line) for line in inside.split("\n")]
    assert schemas == [tool["function"] for tool in domain.tool_schemas()]
    assert chat_format.tool_names == frozenset(domain.tool_names) and len(chat_format.tool_names) == 14
    assert '<tool_call>\n{"name": "<tool name>", "arguments": {<arguments as a JSON object>}}\n</tool_call>' in prompt
    assert prompt == build_system_prompt(domain.policy, domain.tool_schemas())


def test_token_ids_of_the_domain_tokenizer(chat_format, domain_tokenizer):
    assert chat_format.end_of_turn == "<|im_end|>"
    # specials are trained first: <|endoftext|> 0, <|im_start|> 1, <|im_end|> 2
    assert chat_format.eos_token_ids == [2] and chat_format.end_of_turn_id == 2
    assert chat_format.pad_token_id == 0
    ids = chat_format.encode("<tool_call>\n{}\n</tool_call><|im_end|>")
    assert ids[0] == domain_tokenizer.convert_tokens_to_ids("<tool_call>") and ids[-1] == 2
    assert chat_format.decode(ids) == "<tool_call>\n{}\n</tool_call><|im_end|>"


def test_render_is_chatml_by_hand(chat_format):
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Hi"},
        LOOKUP,
        {"role": "tool", "tool_call_id": "call_0", "name": "get_user_details", "content": "{}"},
    ]
    expected = (
        "<|im_start|>system\nS<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nI will look you up.\n<tool_call>\n"
        '{"name": "get_user_details", "arguments": {"user_id": "mia_li_3668"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>tool\n{}<|im_end|>\n"
    )
    assert chat_format.render(messages, add_generation_prompt=False) == expected
    assert chat_format.render(messages, add_generation_prompt=True) == expected + "<|im_start|>assistant\n"
    assert chat_format.encode_prompt(messages) == chat_format.encode(expected + "<|im_start|>assistant\n")


def test_our_template_renders_openai_tool_calls_like_chat_format(domain, chat_format, domain_tokenizer):
    """apply_chat_template on OpenAI messages (arguments as dicts) == ChatFormat.render."""
    messages = gold_transcript(domain, 0)
    with_dicts = [
        {**m, "tool_calls": [{**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"])}}
                             for c in m["tool_calls"]]} if m.get("tool_calls") else m
        for m in messages
    ]
    for variant in (messages, with_dicts):
        rendered = domain_tokenizer.apply_chat_template(variant, tokenize=False, add_generation_prompt=True)
        assert rendered == chat_format.render(messages, add_generation_prompt=True)


def test_chat_messages_converts_openai_transcripts(chat_format):
    openai = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Hi"},
        LOOKUP,
        {"role": "tool", "tool_call_id": "call_0", "name": "get_user_details", "content": "{}"},
        {"role": "assistant", "content": "Done."},
    ]
    chat = chat_format.chat_messages(openai)
    assert chat == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": render_assistant("I will look you up.", "get_user_details",
                                                          {"user_id": "mia_li_3668"})},
        {"role": "tool", "content": "{}"},
        {"role": "assistant", "content": "Done."},
    ]
    assert chat_format.chat_messages(chat) == chat  # idempotent
    assert chat_format.openai_messages(chat) == openai  # and invertible


def test_openai_messages_numbers_calls_and_keeps_invalid_turns(chat_format):
    chat = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": render_assistant("", "list_all_airports", {}) + "<|im_end|>"},
        {"role": "tool", "content": "[]"},
        {"role": "assistant", "content": "<tool_call>\n{broken\n</tool_call>"},
        {"role": "tool", "content": "Error: the tool call is not valid JSON"},
        {"role": "assistant", "content": render_assistant("Again.", "think", {"thought": "x"})},
        {"role": "tool", "content": ""},
        {"role": "assistant", "content": "Bye!\n"},
    ]
    out = chat_format.openai_messages(chat)
    assert out[1] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "list_all_airports", "arguments": "{}"}}]}
    assert out[2] == {"role": "tool", "tool_call_id": "call_0", "name": "list_all_airports", "content": "[]"}
    assert out[3] == {"role": "assistant", "content": "<tool_call>\n{broken\n</tool_call>"}
    assert out[4] == {"role": "tool", "content": "Error: the tool call is not valid JSON"}
    assert out[5]["tool_calls"][0]["id"] == "call_1" and out[5]["content"] == "Again."
    assert out[6]["tool_call_id"] == "call_1"
    assert out[7] == {"role": "assistant", "content": "Bye!"}


def test_initial_messages(chat_format):
    assert chat_format.initial_messages("I want to cancel.") == [
        {"role": "system", "content": chat_format.system_prompt},
        {"role": "user", "content": "I want to cancel."},
    ]


def _simulate_rollout(chat_format: ChatFormat, openai_messages):
    """Grow a token stream the way the rollout engine does; return it with the chat messages."""
    chat = chat_format.chat_messages(openai_messages)
    first_assistant = next(i for i, m in enumerate(chat) if m["role"] == "assistant")
    stream = chat_format.encode_prompt(chat[:first_assistant])
    i = first_assistant
    while i < len(chat):
        assert chat[i]["role"] == "assistant"
        stream += chat_format.encode(chat[i]["content"]) + [chat_format.end_of_turn_id]  # "sampled"
        j = i + 1
        while j < len(chat) and chat[j]["role"] != "assistant":
            j += 1
        if i + 1 < len(chat):
            stream += chat_format.encode_delta(chat[: i + 1], chat[i + 1 : j])
        i = j
    return stream, chat


@pytest.mark.parametrize("task_index", [0, 4, 11])
def test_delta_encoding_reproduces_the_full_encoding(domain, chat_format, task_index):
    """prompt + sampled turns + deltas == encode(render(whole conversation)), token for token."""
    transcript = gold_transcript(domain, task_index)
    transcript[0] = {"role": "system", "content": chat_format.system_prompt}
    stream, chat = _simulate_rollout(chat_format, transcript)
    last_assistant = max(i for i, m in enumerate(chat) if m["role"] == "assistant")
    assert stream == chat_format.encode_prompt(chat)  # ends with the user's goodbye + generation prompt
    assert chat_format.decode(stream) == chat_format.render(chat, add_generation_prompt=True)
    assert last_assistant == len(chat) - 2


def test_delta_is_glue_new_messages_and_generation_prompt(chat_format):
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
    delta = chat_format.encode_delta(messages, [{"role": "user", "content": "Cancel ZFA04Y."}])
    assert chat_format.decode(delta) == "\n<|im_start|>user\nCancel ZFA04Y.<|im_end|>\n<|im_start|>assistant\n"


def test_delta_refuses_a_template_that_rewrites_history(domain, domain_tokenizer):
    """A template that hides earlier assistant reasoning cannot be grown by appending."""
    template = (
        "{%- for m in messages -%}"
        "{%- set c = m['content'] -%}"
        "{%- if m['role'] == 'assistant' and not loop.last and '<tool_call>' in c -%}"
        "{%- set c = '<tool_call>' + c.split('<tool_call>')[1] -%}{%- endif -%}"
        "{{- '<|im_start|>' + m['role'] + '\\n' + c + '<|im_end|>\\n' -}}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
    )
    rewriting = ChatFormat(_with_template(domain_tokenizer, template), domain.tool_schemas(), domain.policy)
    messages = [{"role": "user", "content": "Hi"},
                {"role": "assistant", "content": render_assistant("Let me think.", "think", {"thought": "x"})}]
    with pytest.raises(ValueError, match="prefix"):
        rewriting.encode_delta(messages, [{"role": "tool", "content": ""}])


def _with_template(tokenizer, template: str):
    import copy

    clone = copy.deepcopy(tokenizer)
    clone.chat_template = template
    return clone


def test_end_of_turn_is_found_from_the_template(domain, domain_tokenizer):
    """A template whose turns end with <|endoftext|> gets that as its end-of-turn token."""
    template = (
        "{%- for m in messages -%}{{- m['role'] + ': ' + m['content'] + '<|endoftext|>' -}}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- 'assistant: ' -}}{%- endif -%}"
    )
    plain = ChatFormat(_with_template(domain_tokenizer, template), domain.tool_schemas(), domain.policy)
    assert plain.end_of_turn == "<|endoftext|>" and plain.eos_token_ids == [0, 2]


def test_a_tokenizer_without_template_is_refused(domain, domain_tokenizer):
    bare = _with_template(domain_tokenizer, None)
    with pytest.raises(ValueError, match="no chat template"):
        ChatFormat(bare, domain.tool_schemas(), domain.policy)
