"""PRM-Lite configuration: packaged YAML, custom YAML, validation, clamp, tool classes."""
from __future__ import annotations

import dataclasses

import pytest
from pytest import approx

from agentgrpo.rewards.config import PACKAGED_YAML, RULE_IDS, PRMLiteConfig
from agentgrpo.rewards.prm_lite import PRMLite

from .prm_helpers import calc_text, tool

TABLE = {"P1": -0.05, "P2": -0.03, "P3": -0.03, "P4": -0.04, "P5": -0.10, "P6": -0.05,
         "P7": -0.02, "P8": -0.01, "P9": -0.05, "B1": 0.03, "B2": 0.08, "B3": 0.04, "B4": 0.01,
         "B5": 0.01, "B6": 0.01, "B7": 0.02}


def write_yaml(tmp_path, text: str):
    path = tmp_path / "prm.yaml"
    path.write_text(text)
    return path


def test_packaged_weights_are_the_design_table():
    assert PRMLiteConfig().weights == TABLE
    assert tuple(PRMLiteConfig().weights) == RULE_IDS


def test_default_config_is_the_packaged_yaml():
    assert PRMLiteConfig() == PRMLiteConfig.from_yaml(PACKAGED_YAML)
    assert PRMLite().config == PRMLite.from_yaml(PACKAGED_YAML).config


def test_custom_yaml_weights_and_limits(tmp_path):
    path = write_yaml(tmp_path, "weights:\n  P7: -0.2\n  B4: 0.5\nterse_text_chars: 10\n")
    prm = PRMLite.from_yaml(path)
    assert prm.weights["P7"] == -0.2 and prm.weights["B4"] == 0.5
    assert prm.weights["P1"] == -0.05                       # unnamed rules keep defaults
    res = prm.score_steps([calc_text("x" * 12), calc_text("x" * 9),
                           tool("get_user_details", user_id="mia_li_3668")])
    assert res.fired_per_step == [[], ["P7"], ["B4"]]
    assert res.step_scores == [0.0, approx(-0.2), approx(0.5)]
    assert res.process_score == approx(0.3 / 3 - 0.05)      # P6: no think step


def test_custom_yaml_tool_classes_replace_the_airline_ones(tmp_path):
    path = write_yaml(tmp_path, "tool_classes:\n  write: [refund_order]\n  read: [get_order]\n")
    prm = PRMLite.from_yaml(path)
    assert prm.config.tool_classes["think"] == []
    res = prm.score_steps([tool("get_order", order_id="A1"),
                           tool("refund_order", reservation_id="ABC"),
                           tool("get_user_details", user_id="mia_li_3668")])
    assert res.fired_per_step == [["B4"], ["P1"], []]       # get_user_details: generic now


def test_constructor_tool_classes_for_another_domain():
    prm = PRMLite(tool_classes={"write": ["refund_order"], "read": ["get_order"],
                                "terminal": ["escalate"], "think": ["think"]})
    res = prm.score_steps([tool("escalate", summary="Customer asks for a manager."),
                           tool("refund_order", order_id="unknown")])
    assert res.fired_per_step == [["P5"], ["P1"]]


@pytest.mark.parametrize("text, error", [
    ("bogus_key: 1\n", ValueError),
    ("weights:\n  P10: -0.1\n", ValueError),
    ("weights:\n  B1: 0.06\n", ValueError),             # recovery above the error's cost
    ("weights:\n  P9: -0.01\n", ValueError),
    ("weights:\n  P1: 0.1\n", ValueError),
    ("weights:\n  B2: -0.1\n", ValueError),
    ("weights:\n  B2: high\n", TypeError),
    ("think_text_chars: '100'\n", TypeError),
    ("overlong_counts_think: 1\n", TypeError),
    ("process_clamp: [0.1, 0.5]\n", ValueError),
    ("chain_blocked_by: [P1, X1]\n", ValueError),
    ("tool_classes:\n  writes: [a]\n", ValueError),
    ("tool_classes:\n  write: [a]\n  read: [a]\n", ValueError),
    ("placeholder_patterns: ['(']\n", ValueError),
    ("entity_schemas:\n  order: {pattern: '[A-Z'}\n", ValueError),
    ("entity_schemas:\n  order: {pattern: 'A', args: [x]}\n", ValueError),
    ("step_mean_over: tokens\n", ValueError),
])
def test_bad_config_fails_at_construction(tmp_path, text, error):
    with pytest.raises(error):
        PRMLite.from_yaml(write_yaml(tmp_path, text))


def test_clamp_low_side():
    prm = PRMLite(PRMLiteConfig(weights={"P7": -1.0}))
    res = prm.score_steps([calc_text("")])
    assert res.step_scores == [-1.0]
    assert res.mean_step == -1.0
    assert res.process_score == -0.5


def test_clamp_high_side():
    prm = PRMLite(PRMLiteConfig(weights={"B4": 2.0}))
    res = prm.score_steps([tool("get_user_details", user_id="mia_li_3668")])
    assert res.step_scores == [2.0]
    assert res.process_score == 0.5
    assert res.reward(1.0) == approx(1.15)


def test_custom_clamp_bounds():
    prm = PRMLite(PRMLiteConfig(process_clamp=(-0.01, 0.01)))
    assert prm.score_steps([tool("cancel_reservation", reservation_id="ABC")]).process_score \
        == -0.01


def test_overlong_can_leave_out_think_calls():
    steps = [tool("think", text="", thought="plan")]
    steps += [calc_text(f"{i}+1 please") for i in range(9)]
    counting = PRMLite().score_steps(steps)
    not_counting = PRMLite(PRMLiteConfig(overlong_counts_think=False)).score_steps(steps)
    assert counting.trajectory_adjustment == approx(-0.02)
    assert not_counting.trajectory_adjustment == approx(-0.01)


def test_recovery_and_error_weights_may_be_equal_but_the_recovery_never_larger():
    equal = PRMLite(PRMLiteConfig(weights={"B1": 0.05, "P9": -0.05}))
    steps = [tool("calculate", expression="1/0", obs="Error: division by zero"),
             tool("calculate", expression="2/1", obs="2.0")]
    assert equal.score_steps(steps).step_scores == [approx(-0.05), approx(0.05)]
    with pytest.raises(ValueError, match="weights.B1"):
        PRMLiteConfig(weights={"B1": 0.051, "P9": -0.05})


def test_config_replace_revalidates():
    with pytest.raises(ValueError):
        dataclasses.replace(PRMLiteConfig(), weights={"P3": 0.5})
