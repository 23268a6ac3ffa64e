"""Collate trajectories into the tensors the GRPO update consumes, after leaving out the unusable ones."""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, fields, replace

import numpy as np
import torch

from agentgrpo import metric_names as metric
from agentgrpo.agent.grammar import ToolCallGrammar
from agentgrpo.agent.types import Trajectory
from agentgrpo.algos import TokenMasks
from agentgrpo.config import EndpointError
from agentgrpo.envs.types import ABORTED

_TOKEN_FIELDS = {"input_ids", "attention_mask", "response_mask", "rollout_logprobs", "advantages", "old_logprobs",
                 "ref_logprobs"}


@dataclass
class RolloutBatch:
    """A GRPO batch of B trajectories, right-padded to T tokens.

    Token-aligned fields are (B, T); ``response_mask`` is 1 on tokens the policy
    sampled. ``old_logprobs``/``ref_logprobs``/``advantages`` are filled by the
    trainer's phases; ``group_ids`` names each trajectory's GRPO group.
    """

    input_ids: torch.Tensor  # (B, T) long
    attention_mask: torch.Tensor  # (B, T) long
    response_mask: torch.Tensor  # (B, T) float
    rollout_logprobs: torch.Tensor  # (B, T) the sampler's log-probs (0 off the response)
    scores: torch.Tensor  # (B,) reward the advantages are computed from
    turn_scores: torch.Tensor  # (B, J) per-turn process scores (0 where no turn)
    turn_mask: torch.Tensor  # (B, J) 1 where the trajectory has turn j
    group_ids: list[str]
    advantages: torch.Tensor | None = None  # (B, T)
    seq_advantages: torch.Tensor | None = None  # (B,)
    old_logprobs: torch.Tensor | None = None  # (B, T)
    ref_logprobs: torch.Tensor | None = None  # (B, T)
    token_masks: TokenMasks | None = None  # the allowed tokens of a constrained sampler, per position

    @property
    def size(self) -> int:
        return self.input_ids.shape[0]

    def to(self, device: torch.device | str) -> RolloutBatch:
        """The batch with every tensor on ``device``."""
        return replace(self, **{f.name: getattr(self, f.name).to(device) for f in fields(self)
                                if isinstance(getattr(self, f.name), torch.Tensor | TokenMasks)})

    def select(self, rows: torch.Tensor | list[int]) -> RolloutBatch:
        """The sub-batch of ``rows``, trimmed to its longest row."""
        rows = torch.as_tensor(rows, dtype=torch.long)
        width = max(1, int(self.attention_mask[rows].sum(dim=1).max().item()))
        changes = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, torch.Tensor):
                value = value[rows]
                if f.name in _TOKEN_FIELDS:
                    value = value[:, :width]
                changes[f.name] = value
            elif f.name == "group_ids":
                changes[f.name] = [value[i] for i in rows.tolist()]
            elif isinstance(value, TokenMasks):
                changes[f.name] = value.select(rows, width)
        return replace(self, **changes)


def collate(trajectories: list[Trajectory], pad_token_id: int, grammar: ToolCallGrammar | None = None) -> RolloutBatch:
    """Right-pad token lists into tensors; scores are ``Trajectory.reward``.

    ``grammar``: the trajectories were sampled under it (``rollout.constrain_tool_calls``);
    every turn is replayed through it for the masks the sampler applied (``token_masks``).
    """
    if not trajectories:
        raise ValueError("cannot collate an empty list of trajectories")
    batch, width = len(trajectories), max(len(t.token_ids) for t in trajectories)
    turns = max(1, max(len(t.turns) for t in trajectories))
    input_ids = torch.full((batch, width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros(batch, width, dtype=torch.long)
    response_mask = torch.zeros(batch, width, dtype=torch.float32)
    rollout_logprobs = torch.zeros(batch, width, dtype=torch.float32)
    turn_scores = torch.zeros(batch, turns, dtype=torch.float32)
    turn_mask = torch.zeros(batch, turns, dtype=torch.float32)
    for row, traj in enumerate(trajectories):
        n = len(traj.token_ids)
        input_ids[row, :n] = torch.tensor(traj.token_ids, dtype=torch.long)
        attention_mask[row, :n] = 1
        response_mask[row, :n] = torch.tensor(traj.response_mask, dtype=torch.float32)
        rollout_logprobs[row, :n] = torch.tensor(traj.logprobs, dtype=torch.float32)
        j = len(traj.turn_process_scores)
        if j:
            turn_scores[row, :j] = torch.tensor(traj.turn_process_scores, dtype=torch.float32)
        turn_mask[row, : len(traj.turns)] = 1.0
    return RolloutBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        response_mask=response_mask,
        rollout_logprobs=rollout_logprobs,
        scores=torch.tensor([t.reward for t in trajectories], dtype=torch.float32),
        turn_scores=turn_scores,
        turn_mask=turn_mask,
        group_ids=[t.group_id for t in trajectories],
        token_masks=replay_masks(trajectories, width, grammar) if grammar is not None else None,
    )


def replay_masks(trajectories: list[Trajectory], width: int, grammar: ToolCallGrammar) -> TokenMasks:
    """The masks ``grammar`` gave each sampled token, replayed turn by turn, each distinct mask stored once."""
    index = torch.zeros(len(trajectories), width, dtype=torch.long)
    rows: dict[bytes, int] = {}
    table = [grammar.empty_masks(1)[0]]
    rows[table[0].tobytes()] = 0
    for row, traj in enumerate(trajectories):
        for turn in traj.turns:
            masks = grammar.turn_masks(traj.token_ids[turn.start : turn.end], traj.token_ids[: turn.start])
            for offset, mask in enumerate(masks):
                key = mask.tobytes()
                if key not in rows:
                    rows[key] = len(table)
                    table.append(mask)
                index[row, turn.start + offset] = rows[key]
    return TokenMasks(index, torch.from_numpy(np.stack(table)))


@dataclass
class Dropped:
    """Episodes ``drop_unusable`` left out of a step's batch, by reason."""

    non_finite: int = 0
    """Episodes whose reward is NaN or ±inf (a broken grader or reward function)."""
    aborted: int = 0
    """Episodes a server (the LLM user's) failed for good: no grade, no reward."""
    skipped_groups: int = 0
    """Groups left with fewer than two episodes after the above (their survivors are dropped too)."""
    skipped_episodes: int = 0
    """The survivors of those groups."""

    def metrics(self) -> dict[str, float]:
        return {metric.REWARD_NON_FINITE: float(self.non_finite), metric.ROLLOUT_ABORTED: float(self.aborted),
                metric.ROLLOUT_SKIPPED_GROUPS: float(self.skipped_groups)}


def drop_unusable(trajectories: list[Trajectory]) -> tuple[list[Trajectory], Dropped]:
    """The trajectories a GRPO step can learn from, in order, and what was left out.

    An episode that was aborted (``termination == "aborted"``) or whose outcome reward,
    total reward (``Trajectory.reward``) or a per-turn process score is NaN or ±inf has
    no meaningful advantage, and would poison its whole group's: it leaves the batch. Its
    group's advantages come from the rest; a group that lost episodes and is left with
    fewer than two is skipped (one episode alone has nothing to be compared with).
    Groups that were single from the start (``group_size=1``) are kept as they are.
    Raises ``EndpointError`` when every episode was aborted (the server is gone) and
    ``ValueError`` when nothing else is left to train on.
    """
    dropped = Dropped()
    lost: set[str] = set()
    kept = []
    for traj in trajectories:
        if traj.termination == ABORTED:
            dropped.aborted += 1
        elif not all(math.isfinite(r) for r in (traj.outcome_reward, traj.reward, *traj.turn_process_scores)):
            dropped.non_finite += 1
        else:
            kept.append(traj)
            continue
        lost.add(traj.group_id)
    sizes = Counter(t.group_id for t in kept)
    alone = {group for group in lost if 0 < sizes[group] < 2}
    dropped.skipped_groups = len(alone)
    dropped.skipped_episodes = sum(sizes[group] for group in alone)
    kept = [t for t in kept if t.group_id not in alone]
    if trajectories and not kept:
        if dropped.aborted == len(trajectories):
            errors = [t.info.get("error", "") for t in trajectories if t.info.get("error")]
            raise EndpointError(f"all {len(trajectories)} episodes of the batch were aborted: the LLM user's server "
                                f"failed for good ({errors[-1] if errors else 'no detail'}); check env.user.base_url")
        if dropped.non_finite == len(trajectories):
            raise ValueError(f"all {len(trajectories)} episodes of the batch have a non-finite reward (NaN or ±inf): "
                             "check the grader and reward settings")
        raise ValueError(f"no episode of the batch's {len(trajectories)} is left to train on ({dropped}): check the "
                         "grader, the reward settings and env.user's server")
    return kept, dropped
