"""One turn entry point and one transcript: a generated turn parses the same wherever it is
played, and a chat conversation converts to the transcript its recorded steps give."""
from __future__ import annotations

import pytest

from agentgrpo.agent.chat import transcript_from_chat
from agentgrpo.agent.format import END_OF_TURN_MARKERS, parse_assistant, render_assistant
from agentgrpo.agent.turn import play_turn
from agentgrpo.envs.airline.core.environment import AirlineEnv
from agentgrpo.envs.airline.tasks.generate import generate_domain
from agentgrpo.envs.transcript import build_transcript
from agentgrpo.envs.user_sim import ScriptedUser
from agentgrpo.integrations.trl.rewards import openai_transcript
from agentgrpo.rewards.messages import parse_messages


@pytest.fixture(scope="module")
def generated():
    return generate_domain(0, n_tasks=23)


def fresh_env(generated):
    task = next(t for t in generated.tasks if t.family == "add_bags")
    env = AirlineEnv(generated, task, ScriptedUser(task))
    return env, env.reset()


def test_a_template_end_marker_is_ignored_when_the_caller_passes_its_markers(generated):
    env, _ = fresh_env(generated)
    text = render_assistant("I look you up.", "get_user_details", {"user_id": env.task.user_id}) + "<|my_end|>"
    _, unmarked = play_turn(env, text, env.domain.tool_names)
    assert unmarked.step.kind == "invalid" and "text after </tool_call>" in unmarked.step.observation
    _, marked = play_turn(env, text, env.domain.tool_names, (*END_OF_TURN_MARKERS, "<|my_end|>"))
    assert (marked.step.kind, marked.step.name, marked.step.error) == ("tool", "get_user_details", False)


def test_chat_format_parses_as_play_turn_does_with_its_markers(generated, chat_format):
    env, _ = fresh_env(generated)
    assert chat_format.end_of_turn in chat_format.end_markers
    assert set(END_OF_TURN_MARKERS) <= set(chat_format.end_markers)
    for text in (render_assistant("ok", "think", {"thought": "x"}) + chat_format.end_of_turn,
                 "Which reservation?" + chat_format.end_of_turn, "<tool_call>{broken"):
        parsed, _ = play_turn(env, text, chat_format.tool_names, chat_format.end_markers)
        assert chat_format.parse(text) == parsed


def test_a_chat_conversation_converts_to_the_transcript_of_its_recorded_steps(generated, chat_format):
    env, first = fresh_env(generated)
    opening = [{"role": "system", "content": "policy"}, {"role": "user", "content": first}]
    user, reservation = env.task.user_id, env.task.scenario.reservation_id
    generations = [
        render_assistant("", "get_user_details", {"user_id": user}),
        '<tool_call>\n{"name": "get_reservation_details", "arguments": {\n</tool_call>',  # malformed
        render_assistant("Checking it again.", "get_reservation_details", {"reservation_id": reservation}),
        render_assistant("", "get_reservation_details", {"reservation_id": "ZZZZZZ"}),  # a failing call
        "Shall I add the bags?\n",
    ]
    chat, steps = list(opening), []
    for text in generations:  # as the rollout engine grows a conversation
        _, outcome = play_turn(env, text, chat_format.tool_names, chat_format.end_markers)
        steps.append(outcome.step)
        chat += [{"role": "assistant", "content": text},
                 {"role": outcome.reply_role, "content": outcome.step.observation}]
    assert [s.kind for s in steps] == ["tool", "invalid", "tool", "tool", "respond"]
    assert [s.error for s in steps] == [False, True, False, True, False]
    recorded = build_transcript(opening, steps)
    assert chat_format.openai_messages(chat) == recorded
    assert openai_transcript(chat, chat_format.tool_names) == recorded  # TRL's reward reads the same
    assert transcript_from_chat(chat, lambda t: parse_assistant(t, chat_format.tool_names)) == recorded
    assert parse_messages(recorded).steps == steps
