"""PRM-Lite cannot be gamed by padding (docs/prm_lite.md, "Anti-hacking").

Property: inserting a malformed turn, a failing call, or a repeat of an earlier call
(a repeated read, a no-op write or calculation) anywhere into any trajectory never
raises its process score, whatever text the inserted step carries.
"""
from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st
from pytest import approx

from agentgrpo.envs.types import Step
from agentgrpo.rewards.prm_lite import PRMLite

from .prm_helpers import LONG_TEXT, TEXT, invalid, respond, think, tool
from .test_prm_properties import _ARGS, _TOOLS, steps_strategy, to_messages

PRM = PRMLite()
USER, RES = "mia_li_3668", "ZFA04Y"
OPENING = [f"Hi, my user id is {USER}."]
_ANY_TEXT = st.sampled_from(["", "ok", TEXT, LONG_TEXT, LONG_TEXT * 3])
_ERRORS = st.sampled_from(["Error: malformed tool call", "Error: not found",
                           f"Error: reservation {RES} of {USER} not found"])


@st.composite
def padding(draw, steps: list[Step]) -> Step:
    """One unproductive step that may be inserted after ``steps`` (the prefix)."""
    text = draw(_ANY_TEXT)
    earlier_calls = [s for s in steps if s.kind == "tool" and s.name != "think"]
    kind = draw(st.sampled_from(["malformed", "failing", "repeat"] if earlier_calls
                                else ["malformed", "failing"]))
    if kind == "malformed":
        return Step("invalid", "invalid", {}, draw(_ERRORS), text, error=True)
    if kind == "failing":
        return Step("tool", draw(st.sampled_from(_TOOLS)), draw(_ARGS), draw(_ERRORS), text,
                    error=True)
    return dataclasses.replace(draw(st.sampled_from(earlier_calls)), text=text)


@st.composite
def padded(draw) -> tuple[list[Step], list[Step]]:
    steps = draw(steps_strategy())
    out = list(steps)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(out)))
        out.insert(at, draw(padding(out[:at])))
    return steps, out


@settings(max_examples=1500, deadline=None)
@given(pair=padded(), opening=st.sampled_from([[], OPENING]))
def test_inserting_unproductive_steps_never_raises_the_process_score(pair, opening):
    steps, padded_steps = pair
    before = PRM.score_steps(steps, opening)
    after = PRM.score_steps(padded_steps, opening)
    assert after.process_score <= before.process_score + 1e-12
    assert after.mean_step + after.trajectory_adjustment <= \
        before.mean_step + before.trajectory_adjustment + 1e-12   # also before the clamp


@settings(max_examples=300, deadline=None)
@given(pair=padded())
def test_the_same_holds_for_chat_transcripts(pair):
    steps, padded_steps = pair
    before = PRM.score_messages(to_messages(steps)).process_score
    assert PRM.score_messages(to_messages(padded_steps)).process_score <= before + 1e-12


# ---- the attacks measured against the earlier rules, one by one ---------------------------

def test_a_long_malformed_turn_costs_more_than_its_recovery_pays():
    action = tool("get_user_details", user_id=USER)
    honest = PRM.score_steps([action], OPENING)
    padded_ = PRM.score_steps([invalid(LONG_TEXT), action], OPENING)
    assert padded_.fired_per_step == [["P9"], ["B1", "B3", "B4"]]
    # one productive step: the error (−0.05) and the recovery (+0.03) both land on it
    assert padded_.process_score == approx(honest.process_score - 0.05 + 0.03)


def test_every_error_costs_whatever_its_length():
    for text in ("", TEXT, LONG_TEXT):
        assert "P9" in PRM.score_steps([invalid(text)]).fired
        failing = tool("get_reservation_details", reservation_id=RES, text=text,
                       obs="Error: reservation not found")
        assert "P9" in PRM.score_steps([failing]).fired


def test_recovery_bonus_never_exceeds_the_error_cost():
    assert PRM.weights["B1"] <= -PRM.weights["P9"]


def test_a_read_that_brings_nothing_new_pays_nothing():
    read = tool("get_user_details", user_id=USER, obs='{"user_id": "mia_li_3668"}')
    again = tool("get_user_details", user_id=USER, obs='{"user_id": "mia_li_3668"}',
                 text=LONG_TEXT)
    once = PRM.score_steps([read], OPENING)
    twice = PRM.score_steps([read, again], OPENING)
    assert twice.fired_per_step == [["B3", "B4"], ["P3"]]
    assert twice.process_score == approx(once.process_score - 0.03)  # one productive step
    # the same read after a write returns new information: productive again (no P3)
    write = tool("cancel_reservation", reservation_id=RES, obs='{"status": "cancelled"}')
    fresh = tool("get_user_details", user_id=USER, obs='{"user_id": "mia_li_3668", "n": 0}')
    assert "P3" not in PRM.score_steps([read, write, fresh], OPENING).fired


def test_padding_a_penalised_trajectory_no_longer_dilutes_it():
    transfer = tool("transfer_to_human_agents", summary="User wants a human.")
    alone = PRM.score_steps([transfer]).process_score
    noise = [invalid(LONG_TEXT), tool("calculate", expression="1+1", obs="Error: bad")]
    assert PRM.score_steps(noise + [transfer]).process_score < alone


def test_a_think_before_garbage_earns_no_bonus_it_did_not_earn_before():
    read = tool("get_user_details", user_id=USER, obs='{"a": 1}')
    steps = [read, think(), read, respond()]   # the think's next action is redundant: no B5
    assert "B5" not in PRM.score_steps(steps, OPENING).fired
    padded_ = [read, think(), invalid(), read, respond()]
    assert "B5" not in PRM.score_steps(padded_, OPENING).fired
