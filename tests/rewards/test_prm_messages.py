"""OpenAI-style transcripts -> steps (rewards/messages.py), and scoring them."""
from __future__ import annotations

import json

from pytest import approx

from agentgrpo.agent.types import Trajectory
from agentgrpo.rewards.messages import parse_messages, steps_from_messages

SYSTEM = {"role": "system", "content": "# Airline Agent Policy ..."}


def call(cid: str, name: str, arguments) -> dict:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def assistant(content=None, *calls) -> dict:
    msg = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = list(calls)
    return msg


def tool_msg(cid: str, name: str, content: str) -> dict:
    return {"role": "tool", "tool_call_id": cid, "name": name, "content": content}


def user(content: str) -> dict:
    return {"role": "user", "content": content}


CANCEL_CONVERSATION = [
    SYSTEM,
    user("Hi, I want to cancel reservation ZFA04Y."),
    assistant("Sure. Could you give me your user id so I can look up the booking?"),
    user("It is mia_li_3668."),
    assistant(None, call("c1", "get_reservation_details", {"reservation_id": "ZFA04Y"})),
    tool_msg("c1", "get_reservation_details", '{"reservation_id": "ZFA04Y", "user_id": '
             '"mia_li_3668", "cabin": "business"}'),
    assistant("Reservation ZFA04Y is in business class and can be cancelled. Proceed?"),
    user("Yes, please."),
    assistant(None, call("c2", "cancel_reservation", {"reservation_id": "ZFA04Y"})),
    tool_msg("c2", "cancel_reservation", '{"reservation_id": "ZFA04Y", "status": "cancelled"}'),
    assistant("Done: reservation ZFA04Y is cancelled and the refund is on its way."),
    user("###STOP###"),
]


def test_conversation_maps_to_steps():
    conv = parse_messages(CANCEL_CONVERSATION)
    assert conv.opening == ["Hi, I want to cancel reservation ZFA04Y."]
    assert [(s.kind, s.name) for s in conv.steps] == [
        ("respond", "respond"), ("tool", "get_reservation_details"), ("respond", "respond"),
        ("tool", "cancel_reservation"), ("respond", "respond")]
    first, lookup, ask, cancel, done = conv.steps
    assert first.observation == "It is mia_li_3668."
    assert first.arguments == {"content": first.text}
    assert lookup.arguments == {"reservation_id": "ZFA04Y"}
    assert lookup.text == "" and not lookup.error
    assert ask.observation == "Yes, please."
    assert cancel.observation.startswith('{"reservation_id"')
    assert done.observation == "###STOP###"
    assert conv.turn_of_step == [0, 1, 2, 3, 4]


def test_scoring_the_conversation_by_hand(prm):
    res = prm.score_messages(CANCEL_CONVERSATION)
    # respond (68 chars)      : nothing
    # get_reservation_details : P7 (no text) + B3 (ZFA04Y in the opening) + B4
    # respond (72 chars)      : nothing
    # cancel_reservation      : P7 + B2 (ZFA04Y seen) + B7 ("Yes, please.")
    # respond (67 chars)      : nothing; P6: 5 steps and no think step
    assert res.fired_per_step == [[], ["P7", "B3", "B4"], [], ["P7", "B2", "B7"], []]
    assert res.step_scores == [0.0, approx(0.03), 0.0, approx(0.08), 0.0]
    assert res.trajectory_fired == ["P6"]
    assert res.process_score == approx(0.11 / 5 - 0.05)


def test_multi_call_message_gives_one_step_per_call_with_text_on_the_first():
    msgs = [user("Look up mia_li_3668 and ZFA04Y."),
            assistant("Looking up both.", call("a", "get_user_details", {"user_id": "mia_li_3668"}),
                      call("b", "get_reservation_details", {"reservation_id": "ZFA04Y"})),
            tool_msg("b", "get_reservation_details", '{"reservation_id": "ZFA04Y"}'),
            tool_msg("a", "get_user_details", '{"name": "Mia"}')]
    conv = parse_messages(msgs)
    assert [s.name for s in conv.steps] == ["get_user_details", "get_reservation_details"]
    assert [s.text for s in conv.steps] == ["Looking up both.", ""]
    assert conv.steps[0].observation == '{"name": "Mia"}'          # matched by id
    assert conv.steps[1].observation == '{"reservation_id": "ZFA04Y"}'
    assert conv.turn_of_step == [0, 0]


def test_tool_messages_without_ids_are_matched_in_order():
    msgs = [assistant(None,
                      {"function": {"name": "calculate", "arguments": '{"expression": "1+1"}'}},
                      {"function": {"name": "calculate", "arguments": '{"expression": "2+2"}'}}),
            {"role": "tool", "content": "2.0"}, {"role": "tool", "content": "4.0"}]
    assert [s.observation for s in steps_from_messages(msgs)] == ["2.0", "4.0"]


def test_parallel_calls_do_not_see_each_others_outputs(prm):
    msgs = [assistant(None, call("a", "get_user_details", {"user_id": "mia_li_3668"}),
                      call("b", "get_reservation_details", {"reservation_id": "ZFA04Y"})),
            tool_msg("a", "get_user_details", '{"reservations": ["ZFA04Y"]}'),
            tool_msg("b", "get_reservation_details", '{"reservation_id": "ZFA04Y"}'),
            assistant(None, call("c", "cancel_reservation", {"reservation_id": "ZFA04Y"}))]
    res = prm.score_messages(msgs)
    assert "B3" not in res.fired_per_step[1]      # same turn as the output naming ZFA04Y
    assert "B2" in res.fired_per_step[2]          # a later turn has seen it


def test_malformed_arguments_give_an_invalid_step():
    msgs = [assistant("Cancelling now, one moment please.",
                      call("x", "cancel_reservation", '{"reservation_id": "ZFA04Y"')),
            tool_msg("x", "cancel_reservation", "Error: could not parse the tool call"),
            assistant(None, call("y", "calculate", "[1, 2]")),
            assistant(None, {"id": "z", "type": "function", "function": {"arguments": "{}"}})]
    steps = steps_from_messages(msgs)
    assert [(s.kind, s.name, s.arguments, s.error) for s in steps] == [
        ("invalid", "invalid", {}, True)] * 3
    assert steps[0].text == "Cancelling now, one moment please."
    assert steps[0].observation == "Error: could not parse the tool call"


def test_dict_arguments_empty_arguments_and_error_prefix():
    msgs = [assistant(None, {"id": "a", "type": "function",
                             "function": {"name": "get_reservation_details",
                                          "arguments": {"reservation_id": "ZZZZZZ"}}}),
            tool_msg("a", "get_reservation_details", "Error: reservation ZZZZZZ not found"),
            assistant(None, call("b", "list_all_airports", "")),
            tool_msg("b", "list_all_airports", '{"JFK": "New York"}')]
    first, second = steps_from_messages(msgs)
    assert first.arguments == {"reservation_id": "ZZZZZZ"} and first.error
    assert (second.kind, second.arguments, second.error) == ("tool", {}, False)


def test_tau_bench_result_dict_and_trajectory_object_are_accepted(prm):
    result = {"task_id": 0, "reward": 1.0, "info": {}, "traj": CANCEL_CONVERSATION}
    traj = Trajectory(task_id="0", group_id="g", messages=CANCEL_CONVERSATION)
    expected = prm.score_messages(CANCEL_CONVERSATION)
    assert prm.score_messages(result) == expected
    assert prm.score_messages(traj) == expected
    assert steps_from_messages(result) == steps_from_messages(CANCEL_CONVERSATION)


def test_content_parts_and_consecutive_user_messages():
    msgs = [assistant([{"type": "text", "text": "Shall I "}, {"type": "text", "text": "go on?"}]),
            user("One moment."), user("Yes.")]
    (step,) = steps_from_messages(msgs)
    assert step.arguments == {"content": "Shall I go on?"}
    assert step.observation == "One moment.\nYes."


def test_respond_without_reply_has_empty_observation():
    (step,) = steps_from_messages([user("Hi"), assistant("Hello! How can I help you today?")])
    assert step.observation == ""


def test_plain_assistant_message_answered_by_a_tool_message_is_invalid():
    """ChatFormat.openai_messages keeps a malformed turn as raw text, answered by a tool
    message (no call id) carrying the error."""
    raw = '<tool_call>{"name": "cancel_reservation", "arguments": {"reservation_id": "ZFA04Y"}'
    msgs = [user("Cancel ZFA04Y please."), assistant(raw),
            {"role": "tool", "content": "Error: unclosed <tool_call>."},
            assistant(None, call("call_0", "cancel_reservation", {"reservation_id": "ZFA04Y"})),
            tool_msg("call_0", "cancel_reservation", '{"status": "cancelled"}')]
    bad, retry = steps_from_messages(msgs)
    assert (bad.kind, bad.name, bad.arguments, bad.error) == ("invalid", "invalid", {}, True)
    assert bad.text == raw and bad.observation == "Error: unclosed <tool_call>."
    assert (retry.kind, retry.name) == ("tool", "cancel_reservation")


def test_score_trajectory_uses_steps_and_the_opening_of_the_transcript(prm):
    steps = steps_from_messages(CANCEL_CONVERSATION)
    traj = Trajectory(task_id="0", group_id="g", messages=CANCEL_CONVERSATION, steps=steps)
    assert prm.score_trajectory(traj) == prm.score_messages(CANCEL_CONVERSATION)
    assert "B3" in prm.score_trajectory(traj).fired_per_step[1]         # id from the opening
    assert "B3" not in prm.score_steps(steps).fired_per_step[1]         # no opening given
