"""``apply_turn``: one action on the environment recorded as a Step, with the one error rule."""
from __future__ import annotations

import pytest

from agentgrpo.envs.airline.core.environment import AirlineEnv, run_episode
from agentgrpo.envs.airline.tasks.generate import generate_domain
from agentgrpo.envs.turn import action_error, apply_turn
from agentgrpo.envs.types import Action, is_error_observation
from agentgrpo.envs.user_sim import ScriptedUser


@pytest.fixture(scope="module")
def domain():
    return generate_domain(0, n_tasks=23)


def fresh_env(domain, family="add_bags", max_steps=30):
    task = next(t for t in domain.tasks if t.family == family)
    env = AirlineEnv(domain, task, ScriptedUser(task), max_steps=max_steps)
    env.reset()
    return env


def test_is_error_observation_is_the_prefix_rule():
    assert is_error_observation("Error: user not found")
    for fine in ("", "Errors are rare", "error: lower case", ' {"Error: no": 1}', "Transfer successful"):
        assert not is_error_observation(fine)


def test_each_kind_of_turn(domain):
    env = fresh_env(domain)
    call = apply_turn(env, Action("get_user_details", {"user_id": env.task.user_id}), "Looking up.")
    assert call.step.kind == "tool" and not call.step.error and call.step.text == "Looking up."
    failed = apply_turn(env, Action("get_user_details", {"user_id": "nobody_0000"}))
    assert failed.step.kind == "tool" and failed.step.error and failed.step.observation == "Error: user not found"
    message = apply_turn(env, Action.respond("Which reservation?"), "ignored for a message")
    assert (message.step.kind, message.step.text, message.reply_role) == ("respond", "Which reservation?", "user")
    assert not message.step.error and env.replies == ["Which reservation?"]
    bad = apply_turn(env, None, "<tool_call>oops", "unclosed <tool_call>.")
    assert (bad.step.kind, bad.step.observation, bad.step.text) == (
        "invalid", "Error: unclosed <tool_call>.", "<tool_call>oops")
    assert bad.step.error and bad.result is None and env.steps == 3


def test_action_error_names_what_is_malformed(domain):
    tools = domain.tool_names
    assert action_error(Action.respond("hi"), tools) is None
    assert action_error(Action("think", {"thought": "x"}), tools) is None
    assert action_error(Action("fly_me", {}), tools).startswith("unknown tool 'fly_me'. Available tools: ")
    assert action_error(Action(None, {}), tools).startswith("unknown tool 'NoneType'")  # type: ignore[arg-type]
    assert "must be a JSON object" in action_error(Action("think", "x"), tools)  # type: ignore[arg-type]


def test_run_episode_malformed_turns_skip_the_env_but_count_towards_max_steps(domain):
    env = fresh_env(domain, max_steps=3)

    class Confused:
        last_text = "hmm"

        def __init__(self):
            self.last_error = None

        def act(self, observation):
            self.last_error = "the tool call is not valid JSON (Expecting value)."
            return Action("think", {"thought": "never played"})

    result = run_episode(env, Confused())
    assert [s.kind for s in result.steps] == ["invalid"] * 3 and all(s.error for s in result.steps)
    assert result.steps[0].observation == "Error: the tool call is not valid JSON (Expecting value)."
    assert result.termination == "max_turns" and env.steps == 0 and result.info["steps"] == 0
