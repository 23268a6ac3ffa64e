"""Per-step diagnostics of a rollout batch (DESIGN.md §7): rewards, lengths, errors, endings."""
from __future__ import annotations

import statistics
from collections import Counter

from agentgrpo.agent.types import Trajectory
from agentgrpo.eval.metrics import percentile_50


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
        "rollout/error_rate": sum(t.has_error for t in trajectories) / n,
        "rollout/invalid_rate": sum(t.num_invalid > 0 for t in trajectories) / n,
        "rollout/tool_calls_mean": statistics.fmean(sum(s.is_tool for s in t.steps) for t in trajectories),
    }
    for ending, count in Counter(t.termination for t in trajectories).items():
        metrics[f"rollout/end_{ending}"] = count / n
    fired = Counter()
    for t in trajectories:
        fired.update(t.info.get("prm_fired", {}))
    for rule, count in sorted(fired.items()):
        metrics[f"prm/{rule}_per_traj"] = count / n
    return metrics
