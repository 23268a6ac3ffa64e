"""The per-step rollout metrics ``agentgrpo diagnose`` reads, on hand-built trajectories."""
from __future__ import annotations

import pytest

from agentgrpo.agent.types import Trajectory, Turn
from agentgrpo.envs.types import Step
from agentgrpo.train.rollout_metrics import outcome_saturated_group_frac, rollout_metrics

TOOL = Step("tool", "get_user_details", {"user_id": "mia_li_3668"}, "{}")
REPLY = Step("respond", "respond", {"content": "done"}, "ok")
BAD = Step("invalid", "invalid", {}, "Error: malformed tool call", error=True)


def trajectory(group: str, outcome: float, turns: list[tuple[Step, int]]) -> Trajectory:
    """An episode whose assistant turns are ``(step, tokens)``, laid out back to back."""
    traj = Trajectory(task_id=group, group_id=group, outcome_reward=outcome)
    start = 10
    for step, tokens in turns:
        traj.steps.append(step)
        traj.turns.append(Turn(start, start + tokens, step))
        start += tokens + 5
    traj.token_ids = [0] * start
    traj.response_mask = [0] * start
    return traj


def test_malformed_turns_tokens_per_turn_and_outcome_saturation_by_hand():
    batch = [
        trajectory("a", 1.0, [(TOOL, 10), (BAD, 4)]),
        trajectory("a", 1.0, [(REPLY, 6)]),
        trajectory("b", 0.0, [(BAD, 2), (BAD, 3), (REPLY, 5)]),
        trajectory("b", 1.0, [(TOOL, 20)]),
    ]
    metrics = rollout_metrics(batch)
    assert metrics["rollout/malformed_turn_rate"] == 3 / 7  # 3 malformed of 7 turns
    assert metrics["rollout/tokens_per_turn_mean"] == pytest.approx(50 / 7)  # 10+4+6+2+3+5+20
    assert metrics["rollout/tokens_per_turn_p50"] == 5
    assert metrics["reward/outcome_saturated_group_frac"] == 0.5  # group a all succeed, b mixed
    assert metrics["rollout/invalid_rate"] == 0.5  # trajectories with a malformed turn


def test_outcome_saturation_ignores_single_episode_groups():
    assert outcome_saturated_group_frac([trajectory("a", 0.0, []), trajectory("b", 1.0, [])]) is None
    batch = [trajectory("a", 0.0, []), trajectory("a", 0.0, []), trajectory("b", 1.0, [])]
    assert outcome_saturated_group_frac(batch) == 1.0
    assert "reward/outcome_saturated_group_frac" not in rollout_metrics(batch[1:])


CANCEL = Step("tool", "cancel_reservation", {"reservation_id": "ZFA04Y"}, '{"status": "cancelled"}')
FAILED_CANCEL = Step("tool", "cancel_reservation", {"reservation_id": "NOSUCH"}, "Error: reservation not found")
WRITES = frozenset({"cancel_reservation", "book_reservation"})


def test_write_shares_count_episodes_with_a_write_call_and_with_one_that_succeeded():
    batch = [
        trajectory("a", 1.0, [(TOOL, 5), (CANCEL, 5), (REPLY, 5)]),  # read, then a write that ran
        trajectory("a", 0.0, [(FAILED_CANCEL, 5), (REPLY, 5)]),      # tried to write, failed
        trajectory("b", 1.0, [(TOOL, 5), (REPLY, 5)]),               # read only: no write
        trajectory("b", 1.0, [(FAILED_CANCEL, 5), (CANCEL, 5), (CANCEL, 5)]),  # counted once
        trajectory("c", 1.0, [(REPLY, 5)]),                          # refused
    ]
    metrics = rollout_metrics(batch, WRITES)
    assert metrics["rollout/write_episode_frac"] == 3 / 5
    assert metrics["rollout/executed_write_episode_frac"] == 2 / 5
    # a malformed turn naming a write tool is no write call
    bad_write = Step("invalid", "cancel_reservation", {}, "Error: malformed tool call", error=True)
    assert rollout_metrics([trajectory("d", 0.0, [(bad_write, 3)])], WRITES)["rollout/write_episode_frac"] == 0


def test_no_write_tools_no_write_shares():
    """A domain that declares no write tools logs no share (a 0 would read as "stopped writing")."""
    batch = [trajectory("a", 1.0, [(CANCEL, 5)])]
    for tools in (None, frozenset()):
        assert not {"rollout/write_episode_frac", "rollout/executed_write_episode_frac"} & set(
            rollout_metrics(batch, tools))
