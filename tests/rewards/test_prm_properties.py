"""Properties of PRM-Lite on random trajectories, the transcript round trip, and speed."""
from __future__ import annotations

import copy
import json
import time

from hypothesis import given, settings
from hypothesis import strategies as st
from pytest import approx

from agentgrpo.envs.types import Step
from agentgrpo.rewards.config import TRAJECTORY_RULES
from agentgrpo.rewards.prm_lite import PRMLite

from .prm_helpers import LONG_TEXT, TEXT

PRM = PRMLite()

_TOOLS = ["get_user_details", "get_reservation_details", "search_direct_flight",
          "cancel_reservation", "book_reservation", "send_certificate",
          "transfer_to_human_agents", "calculate", "think", "unknown_tool"]
_VALUES = ["mia_li_3668", "ZFA04Y", "ABC", "TBD", "JFK", "2024-05-20", "HAT136",
           "credit_card_4421486", "<id>", ""]
_ARGS = st.dictionaries(
    st.sampled_from(["user_id", "reservation_id", "origin", "date", "payment_id", "summary"]),
    st.sampled_from(_VALUES), max_size=3)
_OBS = st.sampled_from(["", '{"ok": true}', "Error: not found", "Yes, please.", "no",
                        '{"reservation_id": "ZFA04Y", "user_id": "mia_li_3668"}',
                        '[{"flight_number": "HAT136", "date": "2024-05-20"}]'])
_TEXT = st.sampled_from(["", "ok", TEXT, LONG_TEXT])


@st.composite
def steps_strategy(draw) -> list[Step]:
    steps = []
    for _ in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(["tool", "tool", "tool", "respond", "invalid"]))
        obs, text = draw(_OBS), draw(_TEXT)
        if kind == "tool":
            steps.append(Step("tool", draw(st.sampled_from(_TOOLS)), draw(_ARGS), obs, text,
                              error=obs.startswith("Error:")))
        elif kind == "respond":
            steps.append(Step("respond", "respond", {"content": text}, obs, text))
        else:
            steps.append(Step("invalid", "invalid", {}, obs, text, error=True))
    return steps


def to_messages(steps: list[Step]) -> list[dict]:
    """The inverse of the adapter, written independently: steps as a chat transcript."""
    msgs: list[dict] = [{"role": "system", "content": "policy"}]
    for i, s in enumerate(steps):
        if s.kind == "respond":
            msgs.append({"role": "assistant", "content": s.arguments["content"]})
            if s.observation:
                msgs.append({"role": "user", "content": s.observation})
            continue
        arguments = json.dumps(s.arguments) if s.kind == "tool" else '{"broken": '
        msgs.append({"role": "assistant", "content": s.text or None, "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": s.name, "arguments": arguments}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "name": s.name,
                     "content": s.observation})
    return msgs


@settings(max_examples=300, deadline=None)
@given(steps=steps_strategy())
def test_result_invariants(steps):
    before = copy.deepcopy(steps)
    res = PRM.score_steps(steps)
    assert steps == before                                   # inputs untouched
    assert len(res.step_scores) == len(res.fired_per_step) == len(steps)
    for score, rules in zip(res.step_scores, res.fired_per_step):
        assert score == approx(sum(PRM.weights[r] for r in rules))
        assert not set(rules) & set(TRAJECTORY_RULES)        # per-turn credit stays clean
    assert set(res.trajectory_fired) <= set(TRAJECTORY_RULES)
    assert res.fired == [r for rules in res.fired_per_step for r in rules] + res.trajectory_fired
    # productive: not a think call, not errored, and not the same call and output as an
    # earlier successful call (recomputed here independently of the engine)
    seen, productive = set(), 0
    for s, rules in zip(steps, res.fired_per_step):
        errored = s.error or s.kind == "invalid" or (s.kind == "tool" and s.observation.startswith("Error:"))
        assert ("P9" in rules) == errored
        if s.kind == "tool" and s.name == "think" or errored:
            continue
        key = (s.name, json.dumps(s.arguments, sort_keys=True), s.observation.strip())
        assert ("P3" in rules) == (s.kind == "tool" and key in seen)
        if "P3" in rules:
            assert not any(r.startswith("B") for r in rules)  # no bonus on a redundant call
            continue
        seen.add(key)
        productive += 1
    assert PRM.config.step_mean_over == "productive"
    total = sum(res.step_scores)
    mean = total / productive if productive else min(0.0, total)
    assert res.mean_step == approx(mean)
    assert res.process_score == approx(min(0.5, max(-0.5, mean + res.trajectory_adjustment)))
    tool_steps = sum(1 for s in steps if s.kind == "tool")
    expected_adj = (-0.05 * ("P6" in res.trajectory_fired) + 0.01 * ("B6" in res.trajectory_fired)
                    - 0.01 * max(0, tool_steps - 8))
    assert res.trajectory_adjustment == approx(expected_adj)
    assert res.fired.count("B5") * PRM.weights["B5"] <= PRM.config.think_bonus_cap + 1e-12
    assert PRM.score_steps(steps) == res                     # deterministic


@settings(max_examples=300, deadline=None)
@given(steps=steps_strategy())
def test_transcript_round_trip_scores_the_same(steps):
    assert PRM.score_messages(to_messages(steps)) == PRM.score_steps(steps)


def realistic_trajectory(tau_bench_dir, n_steps: int = 30) -> tuple[list[Step], list[str]]:
    """A 30-step airline episode whose observations are real τ-bench records."""
    users = json.loads((tau_bench_dir / "users.json").read_text())
    reservations = json.loads((tau_bench_dir / "reservations.json").read_text())
    flights = json.loads((tau_bench_dir / "flights.json").read_text())
    uid = next(iter(users))
    rid = users[uid]["reservations"][0]
    search = json.dumps([{**{k: v for k, v in f.items() if k != "dates"},
                          "dates": {"2024-05-16": f["dates"].get("2024-05-16")}}
                         for f in list(flights.values())[:8]])
    cycle = [
        Step("respond", "respond", {"content": LONG_TEXT}, f"My user id is {uid}.", LONG_TEXT),
        Step("tool", "get_user_details", {"user_id": uid}, json.dumps(users[uid]), TEXT),
        Step("tool", "get_reservation_details", {"reservation_id": rid},
             json.dumps(reservations[rid]), TEXT),
        Step("tool", "search_direct_flight", {"origin": "JFK", "destination": "SEA",
                                              "date": "2024-05-20"}, search, ""),
        Step("tool", "think", {"thought": LONG_TEXT}, "", ""),
        Step("tool", "calculate", {"expression": "152 + 103"}, "255.0", ""),
        Step("respond", "respond", {"content": TEXT}, "Yes, please.", TEXT),
        Step("tool", "update_reservation_baggages",
             {"reservation_id": rid, "total_baggages": 2, "nonfree_baggages": 0,
              "payment_id": next(iter(users[uid]["payment_methods"]))},
             json.dumps(reservations[rid]), TEXT),
        Step("tool", "get_reservation_details", {"reservation_id": "BADID1"},
             "Error: reservation not found", ""),
        Step("tool", "get_reservation_details", {"reservation_id": "BADID1"},
             "Error: reservation not found", ""),
    ]
    steps = [copy.deepcopy(cycle[i % len(cycle)]) for i in range(n_steps)]
    return steps, [f"Hi! I need help with reservation {rid}."]


def test_scoring_a_30_step_trajectory_is_fast(tau_bench_dir):
    steps, opening = realistic_trajectory(tau_bench_dir)
    obs_chars = sum(len(s.observation) for s in steps)
    assert obs_chars > 12_000                                # realistic output sizes
    PRM.score_steps(steps, opening)
    runs = 50
    start = time.perf_counter()
    for _ in range(runs):
        res = PRM.score_steps(steps, opening)
    per_call = (time.perf_counter() - start) / runs
    assert {"B2", "B3", "B7", "P4", "P8"} <= set(res.fired)
    assert per_call < 0.01, f"{per_call * 1e3:.2f} ms per 30-step trajectory"   # ~0.2 ms here


def test_a_trajectory_of_think_calls_only_has_no_step_mean():
    think = Step("tool", "think", {"thought": "plan the refund step by step"}, "", text="")
    result = PRM.score_steps([think, think])
    assert "B5" in result.fired  # the first think still earns its bonus as a step score
    # no productive step: only penalties count, so thinking alone earns nothing
    assert result.mean_step == 0.0 and result.process_score == approx(result.trajectory_adjustment)
