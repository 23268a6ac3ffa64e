"""Collate trajectories into the tensors the GRPO update consumes (dropping non-finite rewards first)."""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import torch

from agentgrpo.agent.types import Trajectory

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

    @property
    def size(self) -> int:
        return self.input_ids.shape[0]

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
        return replace(self, **changes)


def collate(trajectories: list[Trajectory], pad_token_id: int) -> RolloutBatch:
    """Right-pad token lists into tensors; scores are ``Trajectory.reward``."""
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
    )


def drop_non_finite(trajectories: list[Trajectory]) -> tuple[list[Trajectory], int]:
    """The trajectories whose rewards are all finite, in order, and how many were dropped.

    An episode whose outcome reward, total reward (``Trajectory.reward``) or a per-turn
    process score is NaN or ±inf (a broken grader or reward function) has no meaningful
    advantage, and would poison its whole group's: it is left out of the step's batch.
    Its group mates stay; one left alone gets advantage 0, as any singleton group does.
    Raises ``ValueError`` when no episode is left to train on.
    """
    kept = [t for t in trajectories
            if all(math.isfinite(r) for r in (t.outcome_reward, t.reward, *t.turn_process_scores))]
    if trajectories and not kept:
        raise ValueError(f"all {len(trajectories)} episodes of the batch have a non-finite reward (NaN or ±inf): "
                         "check the grader and reward settings")
    return kept, len(trajectories) - len(kept)
