"""Which way each part of a GRPO step moves the policy's correct write calls: gradient attribution.

Every term of the GRPO loss is divided by its mini-batch's counts (``mini_batch_counts``), so a
batch's gradient is the sum of its rows' gradients: the part of the groups of tasks that need a
write (``write``) and the part of those that need none (``no_write``). A probe is the first write
call of a successful write episode, ``ℓ`` its summed log-probability under the sampler's masks.
Two measures of what each part does to it:

- **first order**: a gradient step of size η along a part changes ``ℓ`` by ``−η ⟨g_part, ∇ℓ⟩``;
  ``first_order`` is that change per unit η, ``cosine`` the cosine of ``−g_part`` and ``∇ℓ``;
- **one Adam step**: Adam does not step along the gradient (its first step is about η·sign(g) per
  weight), so the trainer's optimizer, fresh, takes one step on the part alone from the same
  weights, and every probe's ``ℓ`` is measured again (``adam``, in nats; weights restored after).

``no_write``'s entries below 0 are the "no-write gradient lowers the first write call" of GRPO's
trade of writes for refusals; ``write``'s above 0 are what the write groups do against it.
"""
from __future__ import annotations

import copy
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from agentgrpo.agent.types import Trajectory
from agentgrpo.eval.stats import bootstrap_mean
from agentgrpo.train.batch import RolloutBatch, collate
from agentgrpo.train.grpo import GRPOTrainer, mini_batch_counts
from agentgrpo.train.optim import make_optimizer

PARTS = ("write", "no_write", "all")
"""The rows a gradient is taken over: the write tasks' groups, the others', and the whole batch."""


@dataclass(frozen=True)
class Probe:
    """The first write call of a successful write episode: token span ``[start, end)`` of ``trajectory``."""

    trajectory: Trajectory
    start: int
    end: int


def first_write_probe(trajectory: Trajectory, write_tools: Collection[str]) -> Probe | None:
    """The trajectory's first write call as a probe, or None when it calls no write tool."""
    for turn in trajectory.turns:
        if turn.step.kind == "tool" and turn.step.name in write_tools:
            return Probe(trajectory, turn.start, turn.end)
    return None


@dataclass
class Attribution:
    """Per probe (same order as the probes) and per part of the batch (``PARTS``)."""

    probe_tasks: list[str]
    rows: dict[str, int]
    """How many episodes each part holds."""
    first_order: dict[str, list[float]] = field(default_factory=dict)
    cosine: dict[str, list[float]] = field(default_factory=dict)
    adam: dict[str, list[float]] = field(default_factory=dict)
    additivity_error: float = 0.0
    """``|g_write + g_no_write − g_all| / |g_all|``: 0 up to rounding when the parts split the step exactly."""

    def summary(self) -> dict[str, Any]:
        """Per measure and part: the mean over probes with its 95% bootstrap interval and the share lowered."""
        out: dict[str, Any] = {"probes": len(self.probe_tasks), "rows": self.rows,
                               "additivity_error": self.additivity_error}
        for name in ("first_order", "cosine", "adam"):
            out[name] = {part: {"mean": bootstrap_mean(values).to_dict(),
                                "lowered_frac": sum(v < 0 for v in values) / len(values)}
                         for part, values in getattr(self, name).items() if values}
        return out


def _params(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def _flat_grad(params: list[torch.nn.Parameter]) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).float() for p in params])


def backward_part(trainer: GRPOTrainer, batch: RolloutBatch, rows: list[int],
                  counts: Mapping[str, Any]) -> None:
    """Leave in ``.grad`` the gradient of the GRPO objective restricted to ``rows`` (the batch's
    ``counts`` as denominators, so the parts of a batch add up to its gradient), micro-batched as
    the trainer does."""
    trainer.model.zero_grad(set_to_none=True)
    size = trainer.config.trainer.micro_batch_size
    with trainer.training_mode():
        for start in range(0, len(rows), size):
            micro = batch.select(rows[start:start + size])
            loss, _ = trainer.objective(trainer.score_tokens(micro), micro, dict(counts))
            loss.backward()


def probe_logprob(trainer: GRPOTrainer, probes_batch: RolloutBatch, index: int, probe: Probe,
                  grad: bool = False) -> float:
    """``ℓ`` of one probe (row ``index`` of the collated probes), with its gradient left in ``.grad`` if ``grad``."""
    with trainer.training_mode(), torch.set_grad_enabled(grad):
        if grad:
            trainer.model.zero_grad(set_to_none=True)
        scores = trainer.score_tokens(probes_batch.select([index]))
        value = scores.logprobs[0, probe.start:probe.end].sum()
        if grad:
            value.backward()
    return float(value.detach())


def attribute(trainer: GRPOTrainer, trajectories: list[Trajectory], write_task_ids: Collection[str],
              probes: list[Probe]) -> Attribution:
    """Split one batch's gradient (``trajectories``, the kept groups of the trainer's sampling) into its
    write and no-write parts and measure each against every probe; the policy's weights are unchanged after."""
    if not probes:
        raise ValueError("no probe: the sampling found no successful write episode to measure against")
    batch, _ = trainer.compute_advantages(trajectories)
    trainer.compute_old_logprobs(batch, trainer.plan_updates(batch, 0))
    rows = {"write": [i for i, t in enumerate(trajectories) if t.task_id in write_task_ids],
            "no_write": [i for i, t in enumerate(trajectories) if t.task_id not in write_task_ids],
            "all": list(range(len(trajectories)))}
    counts = mini_batch_counts(batch, rows["all"])
    params = _params(trainer.model)
    grads = {}
    for part in PARTS:
        backward_part(trainer, batch, rows[part], counts)
        grads[part] = _flat_grad(params)
    total = grads["all"].norm()
    error = float((grads["write"] + grads["no_write"] - grads["all"]).norm() / total) if total > 0 else 0.0
    report = Attribution([p.trajectory.task_id for p in probes], {k: len(v) for k, v in rows.items()},
                         additivity_error=error)
    for part in PARTS:
        report.first_order[part], report.cosine[part] = [], []

    grammar = trainer.groups.engine.grammar
    probes_batch = collate([p.trajectory for p in probes], trainer.groups.chat.pad_token_id, grammar).to(trainer.device)
    before = []
    for index, probe in enumerate(probes):
        before.append(probe_logprob(trainer, probes_batch, index, probe, grad=True))
        probe_grad = _flat_grad(params)
        for part in PARTS:
            dot = float(-(grads[part] @ probe_grad))
            norms = float(grads[part].norm() * probe_grad.norm())
            report.first_order[part].append(dot)
            report.cosine[part].append(dot / norms if norms > 0 else math.nan)
    trainer.model.zero_grad(set_to_none=True)

    for part in PARTS:
        report.adam[part] = [after - b for after, b in zip(
            _after_one_step(trainer, batch, rows[part], counts, probes_batch, probes), before)]
    return report


def _after_one_step(trainer: GRPOTrainer, batch: RolloutBatch, rows: list[int], counts: Mapping[str, Any],
                    probes_batch: RolloutBatch, probes: list[Probe]) -> list[float]:
    """Every probe's ``ℓ`` after one fresh optimizer step (the trainer's lr, betas, clipping) on ``rows``
    alone; the weights are put back after."""
    model, t = trainer.model, trainer.config.trainer
    saved = copy.deepcopy(model.state_dict())
    try:
        optimizer = make_optimizer(model, t.lr, t.weight_decay, t.betas)
        backward_part(trainer, batch, rows, counts)
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.max_grad_norm)
        optimizer.step()
        return [probe_logprob(trainer, probes_batch, i, p) for i, p in enumerate(probes)]
    finally:
        model.load_state_dict(saved)
        model.zero_grad(set_to_none=True)
