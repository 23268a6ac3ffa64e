"""Anti-hacking defenses of PRM-Lite (docs/prm_lite.md, "Anti-hacking").

A policy trained on PRM-Lite should not be able to raise its process score by
stuffing thoughts, by writing placeholder ids the schemas would reject, or by
echoing text to fake a data chain.
"""
from __future__ import annotations

from pytest import approx

from agentgrpo.rewards.config import PRMLiteConfig
from agentgrpo.rewards.prm_lite import PRMLite

from .prm_helpers import LONG_TEXT, respond, think, tool

USER = "mia_li_3668"
RES = "ZFA04Y"
OPENING = [f"Hi, my user id is {USER}."]


def calc(expr: str, **kw):
    return tool("calculate", expression=expr, **kw)


# ---- think stuffing -------------------------------------------------------------------

def test_alternating_think_calls_earn_at_most_the_cap(prm):
    steps = [s for i in range(5) for s in (think(), calc(f"{i}+1"))]
    res = prm.score_steps(steps)
    assert res.fired.count("B5") == 2
    assert sum(prm.weights[r] for r in res.fired if r == "B5") == approx(0.02)


def test_long_text_on_every_step_earns_one_think_bonus(prm):
    res = prm.score_steps([calc(f"{i}+1", text=LONG_TEXT) for i in range(6)])
    assert res.fired_per_step[0] == ["B5"]
    assert res.fired.count("B5") == 1


def test_think_padding_never_beats_a_single_think(prm):
    honest = prm.score_steps([think(), tool("get_user_details", user_id=USER)], opening=OPENING)
    padded = prm.score_steps([think()] * 12 + [tool("get_user_details", user_id=USER)],
                             opening=OPENING)
    assert honest.process_score == approx((0.01 + 0.05) / 2)
    # 13 steps: one B5, one read (B3+B4); P8 charges 13 - 8 = 5 tool steps
    assert padded.process_score == approx(0.06 / 13 - 0.05)
    # the default engine's means skip explicit think calls: one action, the read
    default = PRMLite()
    honest_d = default.score_steps([think(), tool("get_user_details", user_id=USER)], opening=OPENING)
    padded_d = default.score_steps([think()] * 12 + [tool("get_user_details", user_id=USER)],
                                   opening=OPENING)
    assert honest_d.process_score == approx(0.01 + 0.05)
    assert padded_d.process_score == approx(0.06 - 0.05)
    assert padded_d.process_score < honest_d.process_score
    assert padded.process_score < honest.process_score


def test_think_padding_cannot_dilute_penalties_when_means_skip_think_calls():
    transfer = tool("transfer_to_human_agents", summary="User wants a human.")
    padded_steps = [think()] * 7 + [transfer]
    plain = PRMLite(PRMLiteConfig(step_mean_over="steps"))
    # DESIGN §4's literal mean over all steps: 7 neutral think calls dilute P5 (documented)
    assert plain.score_steps([transfer]).process_score == approx(-0.10)
    assert plain.score_steps(padded_steps).process_score == approx((0.01 - 0.10) / 8)
    # the default, step_mean_over: productive, removes the dilution: the gain is only the capped B5
    strict = PRMLite()
    assert strict.config.step_mean_over == "productive"
    gain = (strict.score_steps(padded_steps).process_score
            - strict.score_steps([transfer]).process_score)
    assert gain == approx(0.01)
    assert gain <= strict.config.think_bonus_cap


# ---- placeholder ids caught by the schemas --------------------------------------------

def test_short_ids_are_placeholders_by_schema(prm):
    res = prm.score_steps([tool("get_user_details", user_id="john", obs="Error: not found"),
                           tool("cancel_reservation", reservation_id="ABC")])
    assert res.fired_per_step[0] == ["P2", "P9"]
    assert res.fired_per_step[1] == ["P1"]


def test_nested_bad_values_fire_p1_once(prm):
    step = tool("book_reservation", user_id=USER, origin="JFK", destination="SEA",
                flight_type="one_way", cabin="economy",
                flights=[{"flight_number": "HAT12", "date": "2024-05-20"}],
                passengers=[{"first_name": "Mia", "last_name": "Li", "dob": "1990-02-30"}],
                payment_methods=[{"payment_id": "credit_card_4421486", "amount": 100}],
                total_baggages=0, nonfree_baggages=0, insurance="no")
    assert prm.entities.bad_arguments(step.arguments) == ["flights[0].flight_number",
                                                         "passengers[0].dob"]
    assert prm.score_steps([step]).fired_per_step == [["P1"]]


def test_placeholder_call_earns_no_data_chain_even_with_a_seen_id(prm):
    step = tool("update_reservation_baggages", reservation_id=RES, total_baggages=2,
                nonfree_baggages=0, payment_id="your_card")
    res = prm.score_steps([step], opening=[f"Add a bag to {RES}."])
    assert res.fired_per_step == [["P1"]]
    assert res.process_score == approx(-0.05)


# ---- data chain only from observations ------------------------------------------------

def test_id_in_the_policys_own_text_is_no_data_chain(prm):
    steps = [respond(f"Is your reservation {RES}? I can look it up.", reply="I think so."),
             tool("get_reservation_details", reservation_id=RES,
                  text=f"Looking up reservation {RES} in the system now.")]
    assert prm.score_steps(steps).fired_per_step == [[], ["B4"]]


def test_id_in_the_steps_own_output_is_no_data_chain(prm):
    step = tool("get_reservation_details", reservation_id=RES, obs=f'{{"reservation_id": "{RES}"}}')
    assert prm.score_steps([step]).fired_per_step == [["B4"]]


def test_id_glued_inside_a_longer_token_is_no_data_chain(prm):
    step = tool("get_reservation_details", reservation_id=RES)
    assert prm.score_steps([step], opening=[f"My booking ref is X{RES}9."]).fired == ["B4"]


def test_id_only_in_earlier_arguments_is_no_data_chain(prm):
    steps = [tool("get_reservation_details", reservation_id=RES,
                  obs="Error: reservation not found"),
             tool("cancel_reservation", reservation_id=RES)]
    assert prm.score_steps(steps).fired_per_step == [["P9"], ["B1"]]


def test_echoing_observation_text_into_free_text_arguments_earns_nothing(prm):
    opening = [f"My id is {USER} and booking {RES}; I want a human agent."]
    steps = [tool("calculate", expression=opening[0]),
             tool("transfer_to_human_agents", summary=opening[0])]
    assert prm.score_steps(steps, opening=opening).fired_per_step == [[], ["P5"]]


def test_repeating_a_chained_read_loses_score(prm):
    once = prm.score_steps([tool("get_user_details", user_id=USER)], opening=OPENING)
    twice = prm.score_steps([tool("get_user_details", user_id=USER)] * 2, opening=OPENING)
    assert twice.fired_per_step == [["B3", "B4"], ["P3"]]
    assert twice.process_score == approx((0.05 - 0.03) / 2)
    assert twice.process_score < once.process_score == approx(0.05)
