"""What makes the GRPO trainer's LLD diagnostics exact: one partition of a step's batch, no dropout.

A row's log-probs move by ~1e-6 with the rows it shares a forward pass with (the padding
width, the prompt prefix the forward shares, the kernels' blocking). If the old log-probs
were computed in other micro-batches than the update's, ``new − old`` would be that noise
on unchanged weights: LLDS (gated on ``new < old``) would act on the first mini-batch and
the LLD rate would count that noise for a policy that did not move (the gated fraction can
reach 1.0; the tiny policy's batch of tests/train/test_exact_lld.py, old log-probs in the
previous whole-batch micro-batches, gives 1 in 8 actions). So the trainer plans the
step's partition once (``plan_updates``) and runs the old log-probs, every epoch's updates
and the after-update LLD pass on the same micro-batches, with dropout off
(``disable_dropout``). ``logprob_change`` is the per-step likelihood shift the
``agentgrpo diagnose`` LLD check reads.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from agentgrpo import metric_names as metric
from agentgrpo.algos import preserve_set


@dataclass(frozen=True)
class UpdatePlan:
    """How one step's batch is cut into optimizer steps and forward passes, fixed once per step.

    ``mini_batches[m]`` holds the micro-batches of mini-batch ``m``: lists of batch rows,
    grouped by length so that a micro-batch pads little. Every PPO epoch runs these
    mini-batches in this order (as veRL's actor does), and the old log-probs and the
    after-update LLD pass run on the same micro-batches, so each row is always scored in the
    same company (same padding width, same shared prefix): ``new − old`` is exactly the
    effect of the updates, in every epoch.
    """

    mini_batches: list[list[list[int]]]

    @property
    def micro_batches(self) -> list[list[int]]:
        """Every micro-batch, in update order: every row of the batch exactly once."""
        return [micro for mini in self.mini_batches for micro in mini]


def plan_updates(lengths: torch.Tensor, *, seed: int, mini_batch_size: int, micro_batch_size: int) -> UpdatePlan:
    """The mini- and micro-batches of a batch whose rows have ``lengths`` (B,).

    The rows are shuffled (a generator seeded with ``seed``) and cut into mini-batches of
    ``mini_batch_size`` (the last may be shorter when episodes were dropped); each
    mini-batch's rows are sorted by length (stable) and cut into micro-batches of
    ``micro_batch_size``.
    """
    generator = torch.Generator().manual_seed(seed)
    lengths = lengths.detach().cpu()
    minis = []
    for rows in torch.randperm(lengths.shape[0], generator=generator).split(mini_batch_size):
        order = rows[torch.argsort(lengths[rows], stable=True)].tolist()
        minis.append([order[i : i + micro_batch_size] for i in range(0, len(order), micro_batch_size)])
    return UpdatePlan(minis)


def disable_dropout(model: torch.nn.Module) -> None:
    """Switch off every dropout of ``model``: ``nn.Dropout`` modules (LoRA's among them) and
    the float ``attention_dropout`` of HF attention layers.

    The sampler runs in eval mode; with dropout on, the update's forward would not be the
    behaviour policy (the PPO ratio would be noise, not 1, on the first mini-batch).
    """
    dropouts = (torch.nn.Dropout, torch.nn.Dropout1d, torch.nn.Dropout2d, torch.nn.Dropout3d,
                torch.nn.AlphaDropout, torch.nn.FeatureAlphaDropout)
    for module in model.modules():
        if isinstance(module, dropouts):
            module.p = 0.0
        if isinstance(getattr(module, "attention_dropout", None), float):
            module.attention_dropout = 0.0


LOGPROB_CHANGE_METRICS = (metric.ALGO_LOGP_CHANGE_ADV_NONNEG, metric.ALGO_LOGP_CHANGE_ADV_NEG)


def logprob_change(new: torch.Tensor, old: torch.Tensor, seq_adv: torch.Tensor,
                   mask: torch.Tensor) -> dict[str, float]:
    """Mean per-token log-prob change over a step, ``Σ (new − old)·m / Σ m``, over the
    preserve set (A_b ≥ 0, LLDS's) and over the A_b < 0 rows; NaN (logged as null) where a
    set is empty.

    new, old, mask: (B, T); seq_adv: (B,). Negative = the likelihood fell: on the preserve
    set, the first phase of Lazy Likelihood Displacement (Deng et al. 2025, arXiv:2512.04220).
    """
    keep = preserve_set(seq_adv, mask).unsqueeze(-1).to(mask.dtype)  # (B, 1)
    change = (new - old) * mask  # (B, T)
    sums = torch.stack([(change * keep).sum(), (mask * keep).sum(),
                        (change * (1 - keep)).sum(), (mask * (1 - keep)).sum()]).tolist()  # one host sync
    return {name: total / count if count else math.nan
            for name, total, count in zip(LOGPROB_CHANGE_METRICS, sums[0::2], sums[1::2])}
