"""LLDS: the likelihood-preserving regulariser against Lazy Likelihood Displacement (DESIGN §3.7).

Deng et al. 2025, "On GRPO Collapse in Agent Search: The Lazy Likelihood-Displacement"
(arXiv:2512.04220): during GRPO the log-likelihood of responses — correct ones included —
drifts down, which spirals into collapse. LLDS penalises, only on trajectories with a
non-negative advantage, the tokens whose likelihood fell, and only inside the actions
(assistant turns) whose total likelihood fell:

    Δ[b,t] = old_logp − logp                     (positive = likelihood fell)
    preserve set P = {b : A_b ≥ 0}; actions = maximal runs of mask = 1
    g_a = 1[Σ_{t∈a} Δ > 0]                       (gate "action", the paper's default)
    L_LLDS = Σ_{b∈P} Σ_a g_a Σ_{t∈a} max(0, Δ[b,t]) / N,   N = response tokens of P

Gate ``token`` sets every g_a = 1; gate ``response`` uses one gate per trajectory from
the sum over its whole response. LLDS is exactly 0 while ``logp == old_logp`` (the first
mini-batch of a rollout). Gradients flow only through ``logp``.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch

from agentgrpo.algos.advantages import as_float
from agentgrpo.algos.losses import AggMode, Number, agg_loss
from agentgrpo.algos.segments import gather_segments, max_segments, segment_ids, segment_sum

Gate = Literal["action", "token", "response"]


def _gate_action(action_fell, action_exists, response_fell):
    return action_fell


def _gate_token(action_fell, action_exists, response_fell):
    return action_exists


def _gate_response(action_fell, action_exists, response_fell):
    return action_exists & response_fell.unsqueeze(-1)


# Each gate maps the per-action facts ([B, J] bool, [B, J] bool, [B] bool) to g ([B, J] bool).
_GATES: dict[str, Callable[..., torch.Tensor]] = {
    "action": _gate_action,
    "token": _gate_token,
    "response": _gate_response,
}
GATES = tuple(_GATES)


def _sequence_advantage(adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``A_b`` from ``[B]`` advantages, or from ``[B, T]`` token advantages via the masked
    row sum (whose sign is A_b's when the token weights are positive)."""
    adv = as_float(adv)
    if adv.dim() == 1 and adv.shape[0] == mask.shape[0]:
        return adv
    if adv.shape == mask.shape:
        return torch.where(mask.detach().bool(), adv, torch.zeros_like(adv)).sum(dim=-1)
    raise ValueError(f"adv must have shape [B] or [B, T] = {tuple(mask.shape)}, "
                     f"got {tuple(adv.shape)}")


def preserve_set(adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B]`` bool: the trajectories LLDS preserves, ``A_b ≥ 0`` (``adv`` as in :func:`llds_loss`)."""
    return _sequence_advantage(adv, mask) >= 0


def _ratio(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    return numerator.float() / denominator.float().clamp_min(1)


def llds_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
              gate: Gate | str = "action", *, agg: AggMode | str = "token-mean",
              num_tokens: Number | None = None, num_seqs: Number | None = None,
              horizon: Number | None = None) -> tuple[torch.Tensor, dict]:
    """The LLDS regulariser (see the module docstring for the formula).

    Args:
        logp, old_logp: ``[B, T]`` log-probs under the current / behaviour policy.
        adv: ``[B]`` sequence advantages (``[B, T]`` token advantages also work).
        mask: ``[B, T]`` response mask; its maximal runs of ones are the actions.
        gate: ``action`` (default), ``token`` or ``response``.
        agg: aggregation of the per-token penalty over the preserve-set tokens;
            ``token-mean`` gives the paper's ``/ N``. ``num_tokens`` overrides N (the full
            mini-batch's count, for micro-batching); N = 0 gives a loss of 0.

    Returns:
        ``(loss, metrics)``: ``llds/gated_action_frac`` (gated / preserve-set actions),
        ``llds/penalized_token_frac`` (tokens with ``g·max(0,Δ) > 0`` / preserve-set
        tokens), ``llds/preserve_frac`` (share of trajectories with A ≥ 0),
        ``lld/action_rate`` (share of preserve-set actions whose summed log-likelihood
        fell — DESIGN §7's LLD rate), ``llds/loss``.
    """
    if gate not in _GATES:
        raise ValueError(f"unknown LLDS gate {gate!r}; choose one of {sorted(_GATES)}")
    if not (logp.shape == old_logp.shape == mask.shape):
        raise ValueError("logp, old_logp and mask must share one [B, T] shape")
    current = logp.to(torch.float64 if logp.dtype == torch.float64 else torch.float32)
    delta = as_float(old_logp).to(current.dtype) - current  # [B, T], grad through logp only
    active = mask.detach().bool()
    preserve = preserve_set(adv, mask)  # [B]

    with torch.no_grad():
        fell = torch.where(active, delta, torch.zeros_like(delta))
        ids, num_actions = segment_ids(active)
        width = max_segments(active.shape[-1])  # static bound on actions per row: no host sync
        action_fell = segment_sum(fell, ids, width) > 0  # [B, J]
        action_exists = torch.arange(width, device=ids.device) < num_actions.unsqueeze(-1)
        response_fell = fell.sum(dim=-1) > 0
        action_gate = _GATES[gate](action_fell, action_exists, response_fell) & action_exists
        token_gate = gather_segments(action_gate, ids, fill=False) & preserve.unsqueeze(-1)

    loss_mat = torch.relu(delta) * token_gate.to(delta.dtype)
    preserve_tokens = active & preserve.unsqueeze(-1)
    loss = agg_loss(loss_mat, preserve_tokens, agg, num_tokens=num_tokens, num_seqs=num_seqs,
                    horizon=horizon)

    with torch.no_grad():
        preserve_actions = action_exists & preserve.unsqueeze(-1)
        num_preserve_actions = preserve_actions.sum()
        values = torch.stack([
            _ratio((action_gate & preserve_actions).sum(), num_preserve_actions),
            _ratio((token_gate & (delta > 0)).sum(), preserve_tokens.sum()),
            _ratio(preserve.sum(), torch.tensor(preserve.numel(), device=preserve.device)),
            _ratio((action_fell & preserve_actions).sum(), num_preserve_actions),
            loss.detach().float(),
        ]).tolist()  # one host sync for all metrics
    names = ("llds/gated_action_frac", "llds/penalized_token_frac", "llds/preserve_frac",
             "lld/action_rate", "llds/loss")
    return loss, dict(zip(names, values))
