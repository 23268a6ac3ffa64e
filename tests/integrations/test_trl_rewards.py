"""PRMLiteReward: TRL's reward-function interface over PRM-Lite, on real airline dialogues."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.trl

from agentgrpo.agent.format import openai_assistant_text  # noqa: E402
from agentgrpo.envs.airline import run_episode  # noqa: E402
from agentgrpo.envs.airline.factory import make_env  # noqa: E402
from agentgrpo.integrations.trl import PRMLiteReward  # noqa: E402
from agentgrpo.rewards import PRMLite, parse_messages  # noqa: E402


@pytest.fixture(scope="module")
def reference(bundle, env_config):
    """The oracle's dialogue on a change-flight task, recorded by the environment."""
    from agentgrpo.envs.airline import oracle_agent

    task = bundle.domain.task_by_id("gen-0-28-change_flight")
    return run_episode(
        make_env(bundle, task, env_config, user_seed=0), oracle_agent(bundle.domain, task)
    )


def _as_trl(messages):
    """Prompt (up to the first user message) and completion, assistant turns as Hermes text."""
    prompt, completion = messages[:2], []
    for message in messages[2:]:
        if message["role"] == "assistant":
            completion.append({"role": "assistant", "content": openai_assistant_text(message)})
        else:
            completion.append({"role": message["role"], "content": message["content"]})
    return prompt, completion


def test_hermes_completions_score_like_the_recorded_transcript(reference):
    prompt, completion = _as_trl(reference.messages)
    reward = PRMLiteReward()
    expected = PRMLite().score_messages(reference.messages).process_score
    assert expected != 0.0
    assert reward(prompts=[prompt], completions=[completion], completion_ids=None) == pytest.approx(
        [0.3 * expected]
    )
    transcript = reward.transcript(prompt, completion)
    assert [s.name for s in parse_messages(transcript).steps] == [s.name for s in reference.steps]


def test_native_tool_calls_are_kept(reference):
    """TRL's own tool loop stores calls as tool_calls (arguments as dicts): same score."""
    prompt, completion = reference.messages[:2], []
    for message in reference.messages[2:]:
        message = dict(message)
        if message.get("tool_calls"):
            call = message["tool_calls"][0]
            message["tool_calls"] = [
                {
                    "type": "function",
                    "function": {
                        "name": call["function"]["name"],
                        "arguments": json.loads(call["function"]["arguments"]),
                    },
                }
            ]
        completion.append(message)
    hermes_prompt, hermes_completion = _as_trl(reference.messages)
    reward = PRMLiteReward(coef=1.0)
    assert reward([prompt], [completion]) == pytest.approx(
        reward([hermes_prompt], [hermes_completion])
    )


def test_plain_strings_and_malformed_turns():
    reward = PRMLiteReward(coef=1.0)
    (terse,) = reward(["I want to cancel my trip."], ["OK."])
    assert terse == pytest.approx(
        PRMLite()
        .score_messages(
            [
                {"role": "user", "content": "I want to cancel my trip."},
                {"role": "assistant", "content": "OK."},
            ]
        )
        .process_score
    )
    broken = [
        {
            "role": "assistant",
            "content": '<tool_call>\n{"name": "cancel_reservation"\n</tool_call>',
        },
        {"role": "tool", "content": "Error: the tool call is not valid JSON."},
    ]
    transcript = reward.transcript([{"role": "user", "content": "Cancel ABC123."}], broken)
    assert [s.kind for s in parse_messages(transcript).steps] == ["invalid"]
    assert reward.__name__ == "prm_lite"
