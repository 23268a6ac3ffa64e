"""P4 on malformed turns: a repetition only within a streak (no productive action since the
last malformed turn); repeated failing calls are remembered over the whole trajectory."""
from __future__ import annotations

from agentgrpo.rewards.prm_lite import PRMLite

from .prm_helpers import TEXT, invalid, think, tool

PRM = PRMLite()
USER = "mia_li_3668"


def read(**arguments):
    return tool("get_user_details", obs=f'{{"user_id": "{USER}"}}', **arguments)


def test_a_malformed_turn_after_a_productive_action_is_a_new_error_not_a_repetition():
    res = PRM.score_steps([invalid(), read(user_id=USER), invalid()], [f"I am {USER}."])
    assert res.fired_per_step[0] == ["P9"] and res.fired_per_step[2] == ["P9"]


def test_unproductive_steps_never_end_a_streak():
    failing = tool("get_reservation_details", obs="Error: reservation not found", reservation_id="ZZZZZZ")
    first = read(user_id=USER)
    for between in (think(), failing, first):  # a think call, a failing call, a repeat of a success
        steps = [first, invalid(), between, invalid()]
        assert "P4" in PRM.score_steps(steps).fired_per_step[3], between


def test_a_failing_call_repeated_after_a_success_is_still_a_repetition():
    failing = tool("calculate", obs="Error: division by zero", expression="1/0")
    res = PRM.score_steps([failing, read(user_id=USER), tool("calculate", text=TEXT, obs="Error: division by zero",
                                                             expression="1/0")])
    assert "P4" in res.fired_per_step[2]
