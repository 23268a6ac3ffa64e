"""PRM-Lite rules one by one: each rule fires where it should and not elsewhere.

Expected scores are computed by hand from the packaged weights (prm_lite.yaml):
P1 -.05, P2 -.03, P3 -.03, P4 -.04, P5 -.10, P6 -.05, P7 -.02, P8 -.01/step, P9 -.05,
B1 +.03, B2 +.08, B3 +.04, B4 +.01, B5 +.01, B6 +.01, B7 +.02.
"""
from __future__ import annotations

import pytest
from pytest import approx

from .prm_helpers import LONG_TEXT, invalid, respond, think, tool

USER = "mia_li_3668"
RES = "ZFA04Y"


def calc(expr: str, **kw):
    return tool("calculate", expression=expr, **kw)


# ---- P1 / P2: placeholders and schema-invalid arguments --------------------------------

def test_p1_fires_on_schema_invalid_write_argument(prm):
    res = prm.score_steps([tool("cancel_reservation", reservation_id="ABC")])
    assert res.fired_per_step == [["P1"]]
    assert res.step_scores == [approx(-0.05)]
    assert res.process_score == approx(-0.05)


def test_p1_fires_on_placeholder_keyword_in_nested_write_argument(prm):
    step = tool("update_reservation_baggages", reservation_id=RES, total_baggages=1,
                nonfree_baggages=0, payment_id="TBD")
    assert prm.score_steps([step]).fired_per_step == [["P1"]]


def test_p1_does_not_fire_on_well_formed_write(prm):
    res = prm.score_steps([tool("cancel_reservation", reservation_id=RES)])
    assert res.fired_per_step == [[]]
    assert res.process_score == 0.0


def test_p2_fires_on_read_with_bad_id_not_p1(prm):
    res = prm.score_steps([tool("get_user_details", user_id="john")])
    assert res.fired_per_step == [["P2", "B4"]]
    assert res.step_scores == [approx(-0.03 + 0.01)]


def test_p2_fires_on_generic_tool_placeholder(prm):
    assert prm.score_steps([calc("<expression>")]).fired_per_step == [["P2"]]


def test_p2_does_not_fire_on_valid_read_or_think_text(prm):
    res = prm.score_steps([tool("get_user_details", user_id=USER), think("...")])
    assert res.fired_per_step == [["B4"], []]


# ---- P3: redundant call ---------------------------------------------------------------

def test_p3_fires_on_immediate_repeat(prm):
    res = prm.score_steps([tool("get_user_details", user_id=USER),
                           tool("get_user_details", user_id=USER)])
    assert res.fired_per_step == [["B4"], ["P3"]]
    assert res.step_scores == [approx(0.01), approx(-0.03)]


def test_p3_looks_back_over_the_whole_trajectory(prm):
    steps = [calc("1+1"), think(), think(), think(), calc("2+2"), calc("3+3"), calc("4+4"),
             calc("1+1")]
    assert "P3" in prm.score_steps(steps).fired_per_step[-1]


def test_p3_does_not_fire_with_other_arguments_or_a_new_output(prm):
    steps = [calc("1+1"), calc("2+2"), calc("3+3"), calc("4+4")]
    assert all("P3" not in rules for rules in prm.score_steps(steps).fired_per_step)
    # the same read after a write: the world changed, its output is new
    reread = [tool("get_reservation_details", reservation_id=RES, obs='{"status": "active"}'),
              tool("cancel_reservation", reservation_id=RES),
              tool("get_reservation_details", reservation_id=RES, obs='{"status": "cancelled"}')]
    assert all("P3" not in rules for rules in prm.score_steps(reread).fired_per_step)


# ---- P4: error repetition -------------------------------------------------------------

def test_p4_fires_when_errored_call_is_repeated(prm):
    res = prm.score_steps([calc("1/0", obs="Error: division by zero"), calc("1/0")])
    assert res.fired_per_step == [["P9"], ["P4"]]          # no B1: the same call again
    assert res.step_scores == [approx(-0.05), approx(-0.04)]


def test_p4_looks_past_think_calls(prm):
    res = prm.score_steps([calc("1/0", obs="Error: division by zero"), think(), calc("1/0")])
    assert "P4" in res.fired_per_step[2]


def test_p4_does_not_fire_after_success_or_on_a_different_call(prm):
    after_success = prm.score_steps([calc("1+1"), calc("1+1")])
    different = prm.score_steps([calc("1/0", obs="Error: division by zero"), calc("1/1")])
    assert after_success.fired_per_step == [[], ["P3"]]
    assert "P4" not in different.fired


def test_p4_fires_on_repeated_malformed_generation(prm):
    assert prm.score_steps([invalid(), invalid()]).fired_per_step == [["P9"], ["P4", "P9"]]


# ---- P5: transfer without a read ------------------------------------------------------

def test_p5_fires_on_transfer_before_any_read(prm):
    res = prm.score_steps([tool("transfer_to_human_agents", summary="User wants a refund.")])
    assert res.fired_per_step == [["P5"]]
    assert res.process_score == approx(-0.10)


def test_p5_fires_when_the_only_read_errored(prm):
    steps = [tool("get_user_details", user_id=USER, obs="Error: user not found"),
             tool("transfer_to_human_agents", summary="User wants a refund.")]
    assert "P5" in prm.score_steps(steps).fired_per_step[1]


def test_p5_does_not_fire_after_a_successful_read(prm):
    steps = [tool("get_user_details", user_id=USER),
             tool("transfer_to_human_agents", summary="User wants a refund.")]
    assert prm.score_steps(steps).fired_per_step == [["B4"], []]


# ---- P6: no reasoning (trajectory) ----------------------------------------------------

def test_p6_fires_on_three_steps_without_think(prm):
    res = prm.score_steps([calc("1+1"), calc("2+2"), calc("3+3")])
    assert res.trajectory_fired == ["P6"]
    assert res.step_scores == [0.0, 0.0, 0.0]          # trajectory rules stay out
    assert res.trajectory_adjustment == approx(-0.05)
    assert res.process_score == approx(-0.05)


def test_p6_does_not_fire_with_a_think_step_or_short_trajectory(prm):
    explicit = prm.score_steps([calc("1+1"), think(), calc("3+3")])
    long_text = prm.score_steps([calc("1+1"), calc("2+2", text=LONG_TEXT), calc("3+3")])
    short = prm.score_steps([calc("1+1"), calc("2+2")])
    long_reply = prm.score_steps([calc("1+1"), calc("2+2"), respond(LONG_TEXT)])
    for res in (explicit, long_text, short, long_reply):
        assert "P6" not in res.trajectory_fired


# ---- P7: terse step -------------------------------------------------------------------

@pytest.mark.parametrize("text, fires", [("", True), ("x" * 29, True), ("x" * 30, False)])
def test_p7_threshold_is_under_30_characters(prm, text, fires):
    res = prm.score_steps([calc("1+1", text=text)])
    assert ("P7" in res.fired_per_step[0]) is fires


def test_p7_applies_to_short_replies_but_not_think_calls(prm):
    res = prm.score_steps([respond("OK."), think()])
    assert res.fired_per_step == [["P7"], []]
    assert res.mean_step == approx(-0.01)


# ---- P8: overlong (trajectory) --------------------------------------------------------

def test_p8_charges_each_tool_step_beyond_eight_counting_think(prm):
    steps = [think()] + [calc(f"{i}+1") for i in range(9)]     # 10 tool steps
    res = prm.score_steps(steps)
    assert res.fired_per_step[0] == ["B5"]
    assert res.trajectory_fired == ["P8"]
    assert res.trajectory_adjustment == approx(-0.02)
    assert res.process_score == approx(0.01 / 10 - 0.02)


def test_p8_does_not_fire_at_eight_tool_steps_plus_replies(prm):
    steps = [think()] + [calc(f"{i}+1") for i in range(7)] + [respond(), respond("Done.")]
    assert "P8" not in prm.score_steps(steps).trajectory_fired


# ---- B1: recovery ---------------------------------------------------------------------

def test_b1_fires_on_a_different_successful_action_after_an_error(prm):
    res = prm.score_steps([calc("1/0", obs="Error: division by zero"), calc("1/1")])
    assert res.fired_per_step == [["P9"], ["B1"]]
    assert res.step_scores == [approx(-0.05), approx(0.03)]   # an error never pays


def test_b1_fires_on_asking_the_user_after_an_error(prm):
    steps = [tool("get_reservation_details", reservation_id=RES, obs="Error: not found"),
             respond("I could not find that reservation; could you check the ID?")]
    assert prm.score_steps(steps).fired_per_step[1] == ["B1"]


def test_b1_skips_think_calls_between_error_and_recovery(prm):
    steps = [calc("1/0", obs="Error: division by zero"), think(), calc("1/1")]
    assert prm.score_steps(steps).fired_per_step == [["P9"], ["B5"], ["B1"]]


def test_b1_does_not_fire_without_error_or_when_recovery_fails(prm):
    no_error = prm.score_steps([calc("1+1"), calc("2+2")])
    failed = prm.score_steps([calc("1/0", obs="Error: division by zero"),
                              calc("2/0", obs="Error: division by zero")])
    assert "B1" not in no_error.fired and "B1" not in failed.fired


# ---- B2 / B3: data chain --------------------------------------------------------------

def test_b2_fires_on_write_with_id_from_the_users_opening_message(prm):
    res = prm.score_steps([tool("cancel_reservation", reservation_id=RES)],
                          opening=[f"Please cancel my reservation {RES}."])
    assert res.fired_per_step == [["B2"]]
    assert res.process_score == approx(0.08)


def test_b2_fires_on_nested_entity_from_a_tool_output(prm):
    lookup = tool("search_direct_flight", origin="JFK", destination="SEA", date="2024-05-20",
                  obs='[{"flight_number": "HAT136", "date": "2024-05-20"}]')
    book = tool("update_reservation_flights", reservation_id="ABC123", cabin="economy",
                flights=[{"flight_number": "HAT136", "date": "2024-05-21"}],
                payment_id="credit_card_4421486")
    assert prm.score_steps([lookup, book]).fired_per_step[1] == ["B2"]


def test_b2_does_not_fire_on_unseen_ids(prm):
    assert prm.score_steps([tool("cancel_reservation", reservation_id=RES)]).fired == []


def test_b3_fires_on_read_with_user_id_given_by_the_user(prm):
    steps = [respond("Could you tell me your user id, please?", reply=f"Sure, it is {USER}."),
             tool("get_user_details", user_id=USER)]
    res = prm.score_steps(steps)
    assert res.fired_per_step == [[], ["B3", "B4"]]
    assert res.step_scores[1] == approx(0.05)


def test_b3_does_not_fire_without_an_earlier_observation(prm):
    assert prm.score_steps([tool("get_user_details", user_id=USER)]).fired == ["B4"]


def test_slots_score_as_the_ids_they_stand_for(prm):
    """A delexicalised episode (``env.delexicalise``, ``env.delexicalise_places``) writes ids and
    airports as slots: its calls fire the rules their real-id twins fire (B2/B3 from the data
    chain, no P1/P2), and a slot the episode never showed earns no data-chain bonus."""
    def episode(user, res, flight, origin, destination):
        return [respond("Could you tell me your user id, please?", reply=f"Sure, it is {user}."),
                tool("get_user_details", user_id=user, obs=f'{{"reservations": ["{res}"]}}'),
                tool("search_direct_flight", origin=origin, destination=destination, date="2024-05-20",
                     obs=f'[{{"flight_number": "{flight}", "origin": "{origin}"}}]'),
                tool("update_reservation_flights", reservation_id=res, cabin="economy",
                     flights=[{"flight_number": flight, "date": "2024-05-20"}], payment_id="gift_card_1")]
    real = prm.score_steps(episode(USER, RES, "HAT136", "JFK", "SEA"))
    slots = prm.score_steps(episode("<U1>", "<R1>", "<F1>", "<A1>", "<A2>"))
    assert slots.fired_per_step == real.fired_per_step == [[], ["B3", "B4"], ["B4"], ["B2"]]
    assert slots.process_score == approx(real.process_score)
    unseen = prm.score_steps([tool("cancel_reservation", reservation_id="<R9>")])
    assert unseen.fired_per_step == [[]]  # well-formed, never seen: no P1, no B2
    assert prm.score_steps([tool("cancel_reservation", reservation_id="<reservation_id>")]).fired == ["P1"]


# ---- B4: read diversity ---------------------------------------------------------------

def test_b4_fires_on_first_successful_use_of_each_read_tool(prm):
    steps = [tool("get_user_details", user_id=USER),
             tool("get_reservation_details", reservation_id=RES),
             tool("get_reservation_details", reservation_id="ABC123")]
    assert prm.score_steps(steps).fired_per_step == [["B4"], ["B4"], []]
    # a repeated read (same call, same output) pays nothing and does not use up B4
    again = [tool("get_user_details", user_id=USER), tool("get_user_details", user_id=USER)]
    assert prm.score_steps(again).fired_per_step == [["B4"], ["P3"]]


def test_b4_skips_errored_reads_and_waits_for_success(prm):
    steps = [tool("get_reservation_details", reservation_id=RES, obs="Error: not found"),
             tool("get_reservation_details", reservation_id="ABC123")]
    assert prm.score_steps(steps).fired_per_step == [["P9"], ["B1", "B4"]]


# ---- B5: think bonus ------------------------------------------------------------------

def test_b5_fires_on_think_before_a_clean_action(prm):
    res = prm.score_steps([think(), calc("1+1")])
    assert res.fired_per_step == [["B5"], []]
    assert res.process_score == approx(0.005)


def test_b5_counts_long_assistant_text_as_thinking(prm):
    res = prm.score_steps([calc("1+1", text=LONG_TEXT), calc("2+2")])
    assert res.fired_per_step == [["B5"], []]


@pytest.mark.parametrize("steps, name", [
    ([calc("1+1"), think()], "last step"),
    ([think(), think(), calc("1+1")], "second of two consecutive"),
    ([think(), calc("TBD")], "next step has a placeholder"),
    ([calc("1+1"), think(), calc("1+1")], "next step is redundant"),
])
def test_b5_does_not_fire(prm, steps, name):
    res = prm.score_steps(steps)
    assert res.fired.count("B5") == (1 if name == "second of two consecutive" else 0), name


# ---- B6: exploration (trajectory) -----------------------------------------------------

def test_b6_fires_on_three_distinct_read_tools(prm):
    steps = [tool("get_user_details", user_id=USER), think(),
             tool("get_reservation_details", reservation_id=RES),
             tool("search_direct_flight", origin="JFK", destination="SEA", date="2024-05-20")]
    res = prm.score_steps(steps)
    assert res.trajectory_fired == ["B6"]
    assert res.trajectory_adjustment == approx(0.01)
    # step scores: B4, B5, B4, B4 -> mean 0.04 / 4
    assert res.process_score == approx(0.04 / 4 + 0.01)


def test_b6_does_not_fire_on_two_read_tools(prm):
    steps = [tool("get_user_details", user_id=USER), think(),
             tool("get_reservation_details", reservation_id=RES),
             tool("get_reservation_details", reservation_id="ABC123")]
    assert prm.score_steps(steps).trajectory_fired == []


# ---- B7: confirmed write --------------------------------------------------------------

def _confirmed_cancel(reply: str):
    return [respond(f"I will cancel reservation {RES}. Shall I proceed?", reply=reply),
            tool("cancel_reservation", reservation_id=RES)]


def test_b7_fires_after_explicit_yes(prm):
    res = prm.score_steps(_confirmed_cancel("Yes, please go ahead."))
    assert res.fired_per_step == [[], ["B7"]]
    assert res.step_scores[1] == approx(0.02)


@pytest.mark.parametrize("reply", ["I flew yesterday, actually.",
                                   "No, I'm not sure... yes?", "Hmm, what is the fee?"])
def test_b7_does_not_fire_without_explicit_yes(prm, reply):
    assert prm.score_steps(_confirmed_cancel(reply)).fired_per_step == [[], []]


def test_b7_yes_is_consumed_by_a_write(prm):
    steps = _confirmed_cancel("yes") + [tool("send_certificate", user_id=USER, amount=100)]
    assert prm.score_steps(steps).fired_per_step == [[], ["B7"], []]


def test_b7_yes_since_last_write_survives_a_later_question(prm):
    steps = [respond("Shall I cancel it?", reply="Yes."),
             respond("Would you also like a refund to the original card?", reply="Sure."),
             tool("cancel_reservation", reservation_id=RES)]
    assert prm.score_steps(steps).fired_per_step[2] == ["B7"]


@pytest.mark.parametrize("reply, expected", [
    ("yes", True), ("Yes, please.", True), ("yes go ahead", True), ("Confirm.", True),
    ("Okay, yes that's right.", True), ("Please go ahead with it.", True),
    ("yesterday was my flight", False), ("No, yes?", False), ("I don't confirm", False),
    ("Let me think about it and maybe later yes", False), ("", False),
])
def test_confirmation_detection(prm, reply, expected):
    assert prm.is_confirmation(reply) is expected


# ---- aggregation ----------------------------------------------------------------------

def test_fired_lists_step_rules_then_trajectory_rules_with_repeats(prm):
    steps = [calc("1+1", text=""), calc("1+1", text=""), calc("1+1", text="")]
    res = prm.score_steps(steps)
    assert res.fired_per_step == [["P7"], ["P3", "P7"], ["P3", "P7"]]
    assert res.fired == ["P7", "P3", "P7", "P3", "P7", "P6"]
    assert res.rule_counts()["P7"] == 3 and res.rule_counts()["B1"] == 0
    assert res.mean_step == approx((-0.02 - 0.05 - 0.05) / 3)
    assert res.process_score == approx(res.mean_step - 0.05)


def test_empty_trajectory_scores_zero(prm):
    res = prm.score_steps([])
    assert (res.process_score, res.step_scores, res.fired, res.mean_step) == (0.0, [], [], 0.0)


def test_reward_combines_outcome_and_process(prm):
    res = prm.score_steps([tool("cancel_reservation", reservation_id="ABC")])  # -0.05
    assert res.reward(1.0) == approx(1.0 - 0.3 * 0.05)
    assert res.reward(0.0, coef=0.5) == approx(-0.025)
