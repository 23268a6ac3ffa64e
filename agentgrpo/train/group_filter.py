"""Dynamic sampling's group filter (DAPO, Yu et al. 2025, arXiv:2503.14476): which groups carry signal.

A group whose rewards are all equal has zero advantage for every episode: it adds nothing to
the policy gradient but dilutes the batch. Dynamic sampling drops such groups and rolls out
more tasks until ``tasks_per_step`` informative groups are collected.

``trainer.informative_by`` decides which reward must differ within the group. ``outcome``
(the default) follows DAPO, which filters on accuracy: the task's verified success is the
signal the run is trained for. With PRM-Lite in the reward (``reward.process_coef > 0``) the
total reward of an outcome-saturated group almost never ties, so filtering on it would keep
nearly every group — groups whose advantages come from the heuristic process score alone,
scaled up to unit size by the std normalisation. Filtering on the outcome gives every variant
batches of outcome-mixed groups, inside which PRM-Lite still breaks ties between episodes of
equal outcome; ``reward`` keeps the groups the estimator would give any non-zero advantage.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Literal

from agentgrpo.agent.types import Trajectory

InformativeBy = Literal["outcome", "reward"]


def groups_in_order(trajectories: list[Trajectory]) -> dict[str, list[Trajectory]]:
    """Group id → its trajectories, groups in order of first appearance."""
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for traj in trajectories:
        groups[traj.group_id].append(traj)
    return dict(groups)


def is_informative(group: list[Trajectory], by: InformativeBy) -> bool:
    """Whether ``by``'s rewards differ within ``group`` (a group of one never is)."""
    values = [t.outcome_reward if by == "outcome" else t.reward for t in group]
    return len(values) >= 2 and min(values) != max(values)


def outcomes_by_task(groups: dict[str, list[Trajectory]]) -> dict[str, list[float]]:
    """Task id → the outcome rewards of its group (what the frontier sampler learns from)."""
    outcomes: dict[str, list[float]] = defaultdict(list)
    for group in groups.values():
        for traj in group:
            outcomes[traj.task_id].append(traj.outcome_reward)
    return dict(outcomes)
