"""The episode API: termination, rewards at the end, malformed actions, transcripts."""
from __future__ import annotations

import json

import pytest

from agentgrpo.envs.airline.core.environment import AirlineEnv, run_episode
from agentgrpo.envs.airline.simulation.plans import oracle_agent
from agentgrpo.envs.airline.tasks.generate import generate_domain
from agentgrpo.envs.types import USER_STOP, Action
from agentgrpo.envs.user_sim import ScriptedUser


@pytest.fixture(scope="module")
def domain():
    return generate_domain(0, n_tasks=23)


def task_of(domain, family):
    return next(t for t in domain.tasks if t.family == family)


def make_env(domain, family, max_steps=30):
    task = task_of(domain, family)
    return AirlineEnv(domain, task, ScriptedUser(task), max_steps=max_steps), task


def test_user_stop_ends_the_episode_with_the_reward(domain):
    env, task = make_env(domain, "cancel_refused")
    first = env.reset()
    assert isinstance(first, str) and first
    result = env.step(Action.respond("I'm sorry, but I cannot cancel that reservation."))
    assert result.done and result.observation == USER_STOP
    assert result.info["termination"] == "user_stop" == env.termination
    assert result.reward == 1.0  # nothing changed, as the gold (no actions) wants
    assert result.info["grade"]["db_match"] is True
    with pytest.raises(RuntimeError, match="reset"):
        env.step(Action.respond("hello?"))


def test_transfer_ends_the_episode(domain):
    env, task = make_env(domain, "transfer_out_of_scope")
    env.reset()
    result = env.step(Action("transfer_to_human_agents", {"summary": "lost laptop"}))
    assert result.done and result.observation == "Transfer successful"
    assert result.info["termination"] == "transfer" and result.reward == 1.0
    # a transfer call with bad arguments is only an error, not the end
    env.reset()
    result = env.step(Action("transfer_to_human_agents", {}))
    assert not result.done and result.observation.startswith("Error")


def test_an_episode_cut_at_the_step_limit_scores_0_as_in_tau_bench(domain):
    """The database matches the gold after the first step, but the agent never ends the episode:
    τ-bench's loop keeps the reward of its last, unfinished step (0), and so do we."""
    env, task = make_env(domain, "cancel_business", max_steps=3)
    env.reset()
    rid = task.scenario.reservation_id
    first = env.step(Action("cancel_reservation", {"reservation_id": rid}))
    assert not first.done and first.reward == 0.0  # the database already matches the gold...
    assert first.info == {"termination": "running"}
    env.step(Action("think", {"thought": "done"}))
    last = env.step(Action("think", {"thought": "still here"}))
    assert last.done and last.info["termination"] == "max_turns" and last.info["steps"] == 3
    assert last.reward == 0.0 and env.reward == 0.0  # ...but a cut-off episode scores 0
    assert last.info["grade"]["reward_at_cut"] == 1.0 and last.info["grade"]["db_match"]


@pytest.mark.parametrize("termination", ["max_turns", "token_budget"])
def test_an_episode_ended_from_outside_scores_0(domain, termination):
    env, task = make_env(domain, "cancel_business", max_steps=10)
    env.reset()
    env.step(Action("cancel_reservation", {"reservation_id": task.scenario.reservation_id}))
    result = env.finish(termination)
    assert result.done and result.reward == 0.0 and result.info["termination"] == termination
    assert result.info["grade"]["reward_at_cut"] == 1.0


def test_the_same_episode_ended_by_the_user_is_graded(domain):
    env, task = make_env(domain, "cancel_business", max_steps=10)
    env.reset()
    env.step(Action("cancel_reservation", {"reservation_id": task.scenario.reservation_id}))
    result = env.finish("user_stop")
    assert result.reward == 1.0 and "reward_at_cut" not in result.info["grade"]


def test_write_family_gets_zero_without_the_write(domain):
    env, _ = make_env(domain, "cancel_business", max_steps=2)
    env.reset()
    env.step(Action("think", {"thought": "hm"}))
    assert env.step(Action("think", {"thought": "hm"})).reward == 0.0


def test_info_family_needs_the_output_in_a_reply(domain):
    env, task = make_env(domain, "info_gift_card_balance")
    env.reset()
    result = env.step(Action.respond(f"Your gift cards total ${task.outputs[0]}."))
    assert result.done and result.reward == 1.0
    env.reset()
    insisted = env.step(Action.respond("I'm sorry, but I cannot tell you that."))
    assert not insisted.done  # the user insists once
    result = env.step(Action.respond("I'm sorry, but I cannot tell you that."))
    assert result.done and result.reward == 0.0
    assert result.info["grade"]["outputs_found"] == {task.outputs[0]: False}


@pytest.mark.parametrize("action", [
    Action("no_such_tool", {}),
    Action("get_user_details", {"user": "x"}),
    Action("get_user_details", {"user_id": 7}),
    Action("cancel_reservation", "not a dict"),  # type: ignore[arg-type]
    Action(None, {}),  # type: ignore[arg-type]
    Action("book_reservation", {"user_id": "x"}),
])
def test_malformed_actions_are_error_observations(domain, action):
    env, _ = make_env(domain, "add_bags")
    env.reset()
    result = env.step(action)
    assert result.observation.startswith("Error") and not result.done
    assert env.state.db_hash() == domain.new_state().db_hash()


def test_reset_gives_a_fresh_database(domain):
    env, task = make_env(domain, "cancel_business")
    env.reset()
    rid = task.scenario.reservation_id
    env.step(Action("cancel_reservation", {"reservation_id": rid}))
    env.reset()
    observation = env.step(Action("get_reservation_details", {"reservation_id": rid})).observation
    assert "cancelled" not in observation


def test_run_episode_records_openai_style_messages(domain):
    task = task_of(domain, "change_cabin")
    result = run_episode(AirlineEnv(domain, task, ScriptedUser(task)), oracle_agent(domain, task))
    assert result.reward == 1.0 and result.termination == "user_stop"
    roles = [m["role"] for m in result.messages]
    assert roles[:2] == ["system", "user"] and result.messages[0]["content"] == domain.policy
    assert set(roles) == {"system", "user", "assistant", "tool"}
    call = next(m for m in result.messages if "tool_calls" in m)["tool_calls"][0]
    assert call["type"] == "function" and json.loads(call["function"]["arguments"])
    assert len(result.steps) == len(result.actions)
    assert [s.kind for s in result.steps].count("tool") == \
        sum(1 for a in result.actions if not a.is_respond)
    json.dumps(result.to_dict())
    assert result.messages[-1] == {"role": "user", "content": USER_STOP}


def test_invalid_steps_are_recorded_as_invalid(domain):
    task = task_of(domain, "add_bags")

    class Clumsy:
        last_text = "oops"

        def __init__(self):
            self.actions = iter([Action("nope", {"a": 1}), Action.respond("bye")])

        def act(self, observation):
            return next(self.actions, Action.respond("bye"))

    result = run_episode(AirlineEnv(domain, task, ScriptedUser(task), max_steps=2), Clumsy())
    assert result.steps[0].kind == "invalid" and result.steps[0].error
    assert result.termination == "max_turns" and result.reward == 0.0


def test_obeying_a_forbidden_request_scores_zero(domain):
    env, task = make_env(domain, "cancel_refused")
    env.reset()
    rid = task.scenario.reservation_id
    reply = env.step(Action.respond(f"Here is what I will do: cancel reservation {rid}. "
                                    f"Shall I proceed (yes/no)?"))
    assert reply.observation.lower().startswith("yes")  # the user wants it...
    env.step(Action("cancel_reservation", {"reservation_id": rid}))
    result = env.step(Action.respond(f"Reservation {rid} is cancelled."))
    assert result.done and result.reward == 0.0  # ...but the policy forbids it
