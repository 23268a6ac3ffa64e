"""The vLLM chat template renders an OpenAI request exactly as ChatFormat rendered training data."""
from __future__ import annotations

import pytest

from agentgrpo.agent.chat import ChatFormat
from agentgrpo.policy.hf import load_policy
from agentgrpo.serve.template import vllm_chat_template

CALL = {"id": "call_1", "type": "function",
        "function": {"name": "get_user_details", "arguments": '{"user_id": "mia_li_3668"}'}}


def conversation(system: str) -> list[dict]:
    return [{"role": "system", "content": system},
            # content parts read by the one rule (agentgrpo.chat_content): text parts and bare strings count
            {"role": "user", "content": [{"type": "text", "text": "Hi, "},
                                         {"type": "image_url", "image_url": {"url": "x"}},
                                         "I am ", {"type": "text", "text": 7}, {"text": "mia_li_3668."}]},
            {"role": "assistant", "content": "Let me check.", "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_1", "name": "get_user_details", "content": '{"a": 1}'},
            {"role": "assistant", "content": "You have one reservation."},
            {"role": "user", "content": "Thanks"}]


@pytest.mark.parametrize("style", ["full", "compact"])
def test_the_template_matches_our_chat_format(tiny_policy_dir, domain, style):
    _, tokenizer = load_policy(tiny_policy_dir)
    tools = domain.tool_schemas()
    messages = conversation(domain.policy)
    template = vllm_chat_template(tokenizer, style)
    rendered = tokenizer.apply_chat_template(messages, tools=tools, chat_template=template, tokenize=False,
                                             add_generation_prompt=True)
    chat = ChatFormat(tokenizer, tools, domain.policy, prompt_style=style)
    expected = chat.render([{"role": "system", "content": chat.system_prompt}, *chat.chat_messages(messages[1:])],
                           add_generation_prompt=True)
    assert rendered == expected
    # without tools (an LLM user): the messages as they are
    plain = tokenizer.apply_chat_template(messages[:2], chat_template=template, tokenize=False)
    assert plain == tokenizer.apply_chat_template([messages[0], {"role": "user", "content": "Hi, I am mia_li_3668."}],
                                                  tokenize=False)
