"""Fixtures for the conversation-format tests: the generated airline domain and its tokenizer.

The generated world has τ-bench's tools, policy and record shapes, so these tests need no
τ-bench data and run everywhere.
"""
from __future__ import annotations

import json
from typing import Any

import pytest
from helpers import small_env_config

from agentgrpo.agent.chat import ChatFormat
from agentgrpo.envs.airline.factory import build_env
from agentgrpo.policy.tokenizer import domain_corpus, train_tokenizer


@pytest.fixture(scope="session")
def domain():
    """12 generated tasks; task 0 books a round trip (one gold write), task 11 has two writes."""
    return build_env(small_env_config()).domain


@pytest.fixture(scope="session")
def domain_tokenizer(domain):
    """The tiny preset's tokenizer (4,096 tokens) trained on the domain text."""
    return train_tokenizer(domain_corpus(domain), vocab_size=4096)


@pytest.fixture(scope="session")
def chat_format(domain, domain_tokenizer) -> ChatFormat:
    return ChatFormat(domain_tokenizer, domain.tool_schemas(), domain.policy)


def gold_transcript(domain: Any, task_index: int = 0) -> list[dict[str, Any]]:
    """An OpenAI-style transcript that replays a task's gold actions.

    System, the task instruction as the user's first message, a look-up of the user,
    then each gold action as a tool call with a line of reasoning (the first without),
    its real observation, and a closing message plus the user's goodbye.
    """
    task = domain.tasks[task_index]
    state = domain.new_state()
    actions = [("get_user_details", {"user_id": task.user_id})] + [(a.name, a.kwargs) for a in task.actions]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an airline agent."},
        {"role": "user", "content": task.instruction},
    ]
    for k, (name, kwargs) in enumerate(actions):
        call = {"id": f"call_{k}", "type": "function", "function": {"name": name, "arguments": json.dumps(kwargs)}}
        content = None if k == 0 else f"Next I call {name} with what the user confirmed."
        messages.append({"role": "assistant", "content": content, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{k}", "name": name,
                         "content": domain.execute(state, name, kwargs)})
    messages.append({"role": "assistant", "content": "All done. Is there anything else I can help with?"})
    messages.append({"role": "user", "content": "No, thanks. ###STOP###"})
    return messages
