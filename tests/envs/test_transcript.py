"""The one transcript builder and the one error rule: a transcript we write reads back as
exactly the steps it was written from, and PRM-Lite scores the two the same."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgrpo.envs.airline import oracle_agent
from agentgrpo.envs.airline.core.environment import AirlineEnv, run_episode
from agentgrpo.envs.airline.tasks.generate import generate_domain
from agentgrpo.envs.transcript import TranscriptBuilder, build_transcript, opening_of
from agentgrpo.envs.types import Action, Step, error_observation, is_error_observation
from agentgrpo.envs.user_sim import ScriptedUser
from agentgrpo.rewards.messages import looks_like_error_text, parse_messages
from agentgrpo.rewards.prm_lite import PRMLite

PRM = PRMLite()
OPENING = [{"role": "system", "content": "policy"}, {"role": "user", "content": "Hi, I am mia_li_3668."}]


@pytest.fixture(scope="module")
def domain():
    return generate_domain(0, n_tasks=23)


# ---- the error rule -------------------------------------------------------------------------

def test_the_env_writes_errors_that_its_rule_reads_and_only_those():
    assert error_observation("user not found") == "Error: user not found"
    assert is_error_observation(error_observation(""))
    for loose in ("error: lower case", "  Error: indented", "ERROR: shouting"):
        assert not is_error_observation(loose) and looks_like_error_text(loose)
    assert not looks_like_error_text("Errors are rare") and not looks_like_error_text('{"error": 1}')


def test_a_step_decides_its_error_flag_once_and_readers_take_it_as_recorded():
    assert Step("tool", "get_user_details", {}, "Error: user not found").error is True
    assert Step("tool", "get_user_details", {}, "error: lower case").error is False
    assert Step("invalid", "invalid", {}, "Error: bad JSON").error is True
    assert Step("respond", "respond", {"content": "hi"}, "Error: is what the user typed").error is False
    # PRM-Lite charges the recorded flag, never a second opinion on the observation
    recorded_fine = Step("tool", "calculate", {"expression": "1+1"}, "Error: looks odd", "x" * 40, error=False)
    assert "P9" not in PRM.score_steps([recorded_fine]).fired
    recorded_failed = Step("tool", "calculate", {"expression": "1+1"}, "2", "x" * 40, error=True)
    assert PRM.score_steps([recorded_failed]).fired_per_step == [["P9"]]


def test_foreign_transcripts_use_the_tolerant_rule_and_ours_the_strict_one():
    messages = [*OPENING,
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "get_user_details",
                                                                 "arguments": '{"user_id": "x_y_1"}'}}]},
                {"role": "tool", "tool_call_id": "a", "name": "get_user_details", "content": "  error: no user"}]
    assert not parse_messages(messages).steps[0].error
    assert parse_messages(messages, foreign=True).steps[0].error
    assert "P9" in PRM.score_messages(messages, foreign=True).fired
    assert "P9" not in PRM.score_messages(messages).fired


# ---- the builder ------------------------------------------------------------------------------

def test_each_kind_of_step_is_recorded_as_the_module_says():
    steps = [Step("tool", "get_user_details", {"user_id": "mia_li_3668"}, '{"name": "Mia"}', "Looking up."),
             Step("respond", "respond", {"content": "Which one?"}, "The first.", "Which one?"),
             Step("invalid", "invalid", {}, "Error: unclosed <tool_call>.", "<tool_call>oops"),
             Step("tool", "think", {"thought": "é"}, "", "")]
    out = build_transcript(OPENING, steps)
    assert out[:2] == OPENING
    assert out[2:] == [
        {"role": "assistant", "content": "Looking up.", "tool_calls": [
            {"id": "call_0", "type": "function",
             "function": {"name": "get_user_details", "arguments": '{"user_id": "mia_li_3668"}'}}]},
        {"role": "tool", "tool_call_id": "call_0", "name": "get_user_details", "content": '{"name": "Mia"}'},
        {"role": "assistant", "content": "Which one?"},
        {"role": "user", "content": "The first."},
        {"role": "assistant", "content": "<tool_call>oops"},
        {"role": "tool", "content": "Error: unclosed <tool_call>."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "think", "arguments": '{"thought": "é"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "think", "content": ""},
    ]
    assert opening_of(out) == OPENING


def test_replies_are_only_what_was_answered():
    builder = TranscriptBuilder(OPENING)
    builder.add_assistant(Step("tool", "list_all_airports", {}, "[]", ""), call_id="c7")
    builder.add_reply("user", "an interruption")      # not an answer to the call: no id
    builder.add_reply("tool", "late")                 # the call was answered already
    assert builder.messages[3:] == [{"role": "user", "content": "an interruption"},
                                    {"role": "tool", "content": "late"}]
    assert builder.messages[2]["tool_calls"][0]["id"] == "c7"


_TEXTS = st.sampled_from(["", "ok", "Let me check that in the system for you now.", "x" * 120, "é ✓"])
_OBSERVATIONS = st.sampled_from(["", '{"ok": true}', "[]", "Error: not found", "error: lower case",
                                 "Yes, please.", '{"reservation_id": "ZFA04Y"}'])
_ARGUMENTS = st.dictionaries(st.sampled_from(["user_id", "reservation_id", "n", "flags"]),
                             st.one_of(st.sampled_from(["mia_li_3668", "ZFA04Y", ""]), st.integers(-3, 3),
                                       st.lists(st.booleans(), max_size=2)), max_size=3)


@st.composite
def played_steps(draw) -> list[Step]:
    """Steps as ``apply_turn`` records them (flags decided by the environment's rule)."""
    steps = []
    for _ in range(draw(st.integers(0, 10))):
        kind = draw(st.sampled_from(["tool", "respond", "invalid"]))
        text, observation = draw(_TEXTS), draw(_OBSERVATIONS)
        if kind == "tool":
            steps.append(Step("tool", draw(st.sampled_from(["get_user_details", "think", "calculate"])),
                              draw(_ARGUMENTS), observation, text))
        elif kind == "respond":
            steps.append(Step("respond", "respond", {"content": text}, observation, text))
        else:
            steps.append(Step("invalid", "invalid", {}, error_observation(draw(_TEXTS)), text))
    return steps


@settings(max_examples=400, deadline=None)
@given(steps=played_steps(), with_opening=st.booleans())
def test_a_transcript_reads_back_as_its_steps_and_scores_the_same(steps, with_opening):
    opening = OPENING if with_opening else []
    transcript = json.loads(json.dumps(build_transcript(opening, steps)))  # as stored in JSONL
    assert parse_messages(transcript).steps == steps
    assert PRM.score_messages(transcript) == PRM.score_steps(steps, [m["content"] for m in opening[1:]])


# ---- run_episode records through the builder ----------------------------------------------------

class _Fumbling:
    """The oracle, with a malformed turn before every second move."""

    def __init__(self, oracle) -> None:
        self.oracle, self.turn, self.held = oracle, 0, None
        self.last_text, self.last_error = "", None

    def act(self, observation: str) -> Action:
        self.turn += 1
        if self.held is None and self.turn % 2 == 1:
            self.held = (self.oracle.act(observation), self.oracle.last_text)
            self.last_text, self.last_error = '<tool_call>{"name": ', "the tool call is not valid JSON."
            return self.held[0]
        if self.held is not None:
            (action, self.last_text), self.held = self.held, None
        else:
            action, self.last_text = self.oracle.act(observation), self.oracle.last_text
        self.last_error = None
        return action


def test_run_episode_records_malformed_turns_as_malformed_and_reads_back_as_its_steps(domain):
    task = next(t for t in domain.tasks if t.family == "add_bags")
    result = run_episode(AirlineEnv(domain, task, ScriptedUser(task)), _Fumbling(oracle_agent(domain, task)))
    assert result.reward == 1.0 and sum(s.kind == "invalid" for s in result.steps) >= 2
    conversation = parse_messages(result.messages)
    assert conversation.steps == result.steps
    malformed = [m for m in result.messages if m["role"] == "assistant" and m["content"] == '<tool_call>{"name": ']
    assert malformed and all("tool_calls" not in m for m in malformed)
    opening = [result.messages[1]["content"]]
    assert PRM.score_messages(result.messages) == PRM.score_steps(result.steps, opening)
