"""Per-step diagnostics of a rollout batch (DESIGN.md §7): rewards, lengths, errors, endings.

Besides the totals, the series ``agentgrpo diagnose`` reads: ``rollout/malformed_turn_rate``
(format collapse), ``rollout/tokens_per_turn_mean`` (length collapse) and
``reward/outcome_saturated_group_frac`` (groups whose outcomes all agree; unlike the
advantage estimator's ``algo/saturated_group_frac`` it ignores the process score, which
keeps a PRM-Lite reward from ever being exactly 0 or 1).
"""
from __future__ import annotations

import statistics
from collections import Counter, defaultdict

from agentgrpo.agent.types import Trajectory
from agentgrpo.stats_util import percentile_50


def rollout_metrics(trajectories: list[Trajectory]) -> dict[str, float]:
    """Flat ``reward/`` and ``rollout/`` metrics of one batch of trajectories."""
    if not trajectories:
        return {}
    n = len(trajectories)
    turn_tokens = [turn.num_tokens for t in trajectories for turn in t.turns]
    metrics = {
        "reward/outcome_mean": statistics.fmean(t.outcome_reward for t in trajectories),
        "reward/process_mean": statistics.fmean(t.process_score for t in trajectories),
        "reward/total_mean": statistics.fmean(t.reward for t in trajectories),
        "reward/total_std": statistics.pstdev([t.reward for t in trajectories]),
        "rollout/response_tokens_mean": statistics.fmean(t.num_response_tokens for t in trajectories),
        "rollout/sequence_tokens_mean": statistics.fmean(len(t.token_ids) for t in trajectories),
        "rollout/turns_mean": statistics.fmean(len(t.turns) for t in trajectories),
        "rollout/tokens_per_turn_p50": percentile_50(turn_tokens),
        "rollout/tokens_per_turn_mean": statistics.fmean(turn_tokens) if turn_tokens else 0.0,
        # every step is one assistant turn (a tool call, a reply, or a malformed one)
        "rollout/malformed_turn_rate": sum(t.num_invalid for t in trajectories)
        / max(sum(len(t.steps) for t in trajectories), 1),
        "rollout/error_rate": sum(t.has_error for t in trajectories) / n,
        "rollout/invalid_rate": sum(t.num_invalid > 0 for t in trajectories) / n,
        "rollout/tool_calls_mean": statistics.fmean(sum(s.is_tool for s in t.steps) for t in trajectories),
    }
    saturated = outcome_saturated_group_frac(trajectories)
    if saturated is not None:
        metrics["reward/outcome_saturated_group_frac"] = saturated
    for ending, count in Counter(t.termination for t in trajectories).items():
        metrics[f"rollout/end_{ending}"] = count / n
    fired = Counter()
    for t in trajectories:
        fired.update(t.info.get("prm_fired", {}))
    for rule, count in sorted(fired.items()):
        metrics[f"prm/{rule}_per_traj"] = count / n
    return metrics


def outcome_saturated_group_frac(trajectories: list[Trajectory]) -> float | None:
    """Share of the groups of two or more episodes whose outcome rewards are all equal (all
    fail or all succeed: zero outcome advantage); None when no group has two episodes."""
    outcomes: dict[str, list[float]] = defaultdict(list)
    for t in trajectories:
        outcomes[t.group_id].append(t.outcome_reward)
    groups = [values for values in outcomes.values() if len(values) >= 2]
    if not groups:
        return None
    return sum(min(values) == max(values) for values in groups) / len(groups)
