"""Per-step diagnostics of a rollout batch (DESIGN.md §7): rewards, lengths, errors, endings.

Besides the totals, the series ``agentgrpo diagnose`` reads: ``rollout/malformed_turn_rate``
(format collapse), ``rollout/tokens_per_turn_mean`` (length collapse) and
``reward/outcome_saturated_group_frac`` (groups whose outcomes all agree; unlike the
advantage estimator's ``algo/saturated_group_frac`` it ignores the process score, which
keeps a PRM-Lite reward from ever being exactly 0 or 1). Given the domain's write tools
(``agentgrpo.envs.registry.write_tools``), also the share of episodes that call one
(``rollout/write_episode_frac``) and that call one without an error
(``rollout/executed_write_episode_frac``): a policy that learns to refuse stops writing
(``doing_less``).
"""
from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Collection

from agentgrpo import metric_names as metric
from agentgrpo.agent.types import Trajectory
from agentgrpo.envs.types import Step
from agentgrpo.stats_util import percentile_50


def rollout_metrics(trajectories: list[Trajectory], write_tools: Collection[str] | None = None) -> dict[str, float]:
    """Flat ``reward/`` and ``rollout/`` metrics of one batch of trajectories; the write shares
    only with ``write_tools`` (a domain that declares none logs none, rather than a false 0)."""
    if not trajectories:
        return {}
    n = len(trajectories)
    turn_tokens = [turn.num_tokens for t in trajectories for turn in t.turns]
    metrics = {
        metric.REWARD_OUTCOME_MEAN: statistics.fmean(t.outcome_reward for t in trajectories),
        metric.REWARD_PROCESS_MEAN: statistics.fmean(t.process_score for t in trajectories),
        metric.REWARD_TOTAL_MEAN: statistics.fmean(t.reward for t in trajectories),
        metric.REWARD_TOTAL_STD: statistics.pstdev([t.reward for t in trajectories]),
        metric.ROLLOUT_RESPONSE_TOKENS_MEAN: statistics.fmean(t.num_response_tokens for t in trajectories),
        metric.ROLLOUT_SEQUENCE_TOKENS_MEAN: statistics.fmean(len(t.token_ids) for t in trajectories),
        metric.ROLLOUT_TURNS_MEAN: statistics.fmean(len(t.turns) for t in trajectories),
        metric.ROLLOUT_TOKENS_PER_TURN_P50: percentile_50(turn_tokens),
        metric.ROLLOUT_TOKENS_PER_TURN_MEAN: statistics.fmean(turn_tokens) if turn_tokens else 0.0,
        # every step is one assistant turn (a tool call, a reply, or a malformed one)
        metric.ROLLOUT_MALFORMED_TURN_RATE: sum(t.num_invalid for t in trajectories)
        / max(sum(len(t.steps) for t in trajectories), 1),
        metric.ROLLOUT_ERROR_RATE: sum(t.has_error for t in trajectories) / n,
        metric.ROLLOUT_INVALID_RATE: sum(t.num_invalid > 0 for t in trajectories) / n,
        metric.ROLLOUT_TOOL_CALLS_MEAN: statistics.fmean(sum(s.is_tool for s in t.steps) for t in trajectories),
    }
    if write_tools:
        metrics.update(write_episode_fracs(trajectories, write_tools))
    saturated = outcome_saturated_group_frac(trajectories)
    if saturated is not None:
        metrics[metric.REWARD_OUTCOME_SATURATED_GROUP_FRAC] = saturated
    for ending, count in Counter(t.termination for t in trajectories).items():
        metrics[metric.rollout_end(ending)] = count / n
    fired = Counter()
    for t in trajectories:
        fired.update(t.info.get("prm_fired", {}))
    for rule, count in sorted(fired.items()):
        metrics[metric.prm_rule(rule)] = count / n
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


def write_steps(trajectory: Trajectory, write_tools: Collection[str]) -> list[Step]:
    """The episode's well-formed calls to one of ``write_tools`` (executed or refused by the tool)."""
    return [s for s in trajectory.steps if s.kind == "tool" and s.name in write_tools]


def executed_write(trajectory: Trajectory, write_tools: Collection[str]) -> bool:
    """The episode changed the database: a call to a write tool that the tool executed (no error)."""
    return any(not s.error for s in write_steps(trajectory, write_tools))


def write_episode_fracs(trajectories: list[Trajectory], write_tools: Collection[str]) -> dict[str, float]:
    """Shares of the episodes with at least one well-formed call to one of ``write_tools`` (even one
    that failed) and with at least one that succeeded (its step has no error)."""
    n = len(trajectories)
    return {metric.ROLLOUT_WRITE_EPISODE_FRAC: sum(bool(write_steps(t, write_tools)) for t in trajectories) / n,
            metric.ROLLOUT_EXECUTED_WRITE_EPISODE_FRAC: sum(executed_write(t, write_tools) for t in trajectories) / n}
