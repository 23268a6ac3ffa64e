"""One generated turn played on the airline environment: the Step and the error rule of each kind."""
from __future__ import annotations

import json

import pytest

from agentgrpo.agent.format import render_assistant
from agentgrpo.agent.turn import play_turn
from agentgrpo.envs.airline.core.environment import AirlineEnv
from agentgrpo.envs.airline.tasks.generate import generate_domain
from agentgrpo.envs.user_sim import ScriptedUser


@pytest.fixture(scope="module")
def generated():
    return generate_domain(0, n_tasks=23)


@pytest.fixture
def env(generated):
    task = next(t for t in generated.tasks if t.family == "add_bags")
    env = AirlineEnv(generated, task, ScriptedUser(task))
    env.reset()
    return env


def play(env, text):
    return play_turn(env, text, env.domain.tool_names)


def test_valid_call_reaches_the_environment(env):
    text = render_assistant("I will look up your profile.", "get_user_details", {"user_id": env.task.user_id})
    parsed, outcome = play(env, text)
    step = outcome.step
    assert (step.kind, step.name, step.arguments) == ("tool", "get_user_details", {"user_id": env.task.user_id})
    assert env.task.scenario.reservation_id in json.loads(step.observation)["reservations"]
    assert step.text == "I will look up your profile." and not step.error
    assert env.steps == 1 and outcome.result is not None and not outcome.done
    assert outcome.reply_role == "tool" and parsed.kind == "tool"


def test_malformed_call_never_reaches_the_environment(env):
    text = '<tool_call>\n{"name": "get_user_details", "arguments": {\n</tool_call>  '
    _, outcome = play(env, text)
    step = outcome.step
    assert (step.kind, step.name, step.arguments) == ("invalid", "invalid", {})
    assert step.observation.startswith("Error: the tool call is not valid JSON") and step.error
    assert step.text == text  # the raw output, as generated
    assert env.steps == 0 and outcome.result is None and not outcome.done
    assert outcome.reply_role == "tool"


def test_unknown_tool_is_a_malformed_turn(env):
    _, outcome = play(env, render_assistant("", "fly_me", {"to": "the moon"}))
    step = outcome.step
    assert step.kind == "invalid" and step.error and step.observation.startswith("Error: unknown tool 'fly_me'")
    assert env.steps == 0 and outcome.result is None


@pytest.mark.parametrize("arguments,observation", [
    ({"user_id": "nobody_0000"}, "Error: user not found"),
    ({"user": "x"}, "Error: invalid arguments for get_user_details: unexpected argument 'user'"),
])
def test_tool_returning_an_error_is_a_tool_step_with_error(env, arguments, observation):
    _, outcome = play(env, render_assistant("Checking.", "get_user_details", arguments))
    step = outcome.step
    assert (step.kind, step.name, step.arguments) == ("tool", "get_user_details", arguments)
    assert step.observation == observation and step.error
    assert env.steps == 1 and outcome.result is not None


def test_plain_message_goes_to_the_user(env):
    text = "  Could you tell me your reservation id?<|im_end|>"
    parsed, outcome = play(env, text)
    step = outcome.step
    content = "Could you tell me your reservation id?"
    assert (step.kind, step.name, step.arguments, step.text) == ("respond", "respond", {"content": content}, content)
    assert not step.error and step.observation and step.observation == outcome.result.observation
    assert env.replies == [content] and env.steps == 1
    assert outcome.reply_role == "user" and parsed.kind == "respond"
