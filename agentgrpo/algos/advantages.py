"""Advantages for GRPO on multi-turn trajectories (DESIGN §3.1–3.4).

The pipeline, for B trajectories with T padded response tokens:

1. ``group_advantages``: one scalar per trajectory, the outcome score normalised within
   its group (trajectories of the same task), ``A_b = (R_b − mean_g R) / (std_g R + ε)``
   (GRPO, Shao et al. 2024, arXiv:2402.03300) or ``R_b − mean_g R`` (Dr. GRPO, Liu et al.
   2025, arXiv:2503.20783). Groups of size 1 or with zero spread give 0.
2. ``length_normalizer``: ``n(L_b)`` = 1/L (vanilla GRPO), 1/√L (LATA) or 1.
3. ``turn_discount_weights``: ``w_k ∝ α^(L−1−k)`` over active tokens, mean 1 (Turn-Discount).
4. ``token_advantages``: ``Â[b,t] = (A_b + β·c_{b,j(t)}) · n(L_b) · w[b,t] · mask[b,t]``
   with the optional per-turn PRM credit ``c`` (DESIGN §3.4, ``prm_credit: turn``).

Dtypes: everything is computed in float32 (float64 inputs stay float64) and returned in
that dtype, whatever the input dtype (bfloat16 included). Advantages are constants of
the loss: inputs are detached.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal, Union

import torch

from agentgrpo.algos.segments import gather_segments, running_count, segment_ids

GroupIds = Union[torch.Tensor, Sequence[Any]]  # noqa: UP007 (a runtime alias; `|` needs 3.10 types)
LengthNorm = Literal["linear", "sqrt", "none"]
DiscountUnit = Literal["token", "turn"]


def as_float(x: torch.Tensor) -> torch.Tensor:
    """``x`` detached, in float32 (float64 stays float64): the dtype all algos compute in."""
    x = torch.as_tensor(x).detach()
    target = torch.float64 if x.dtype == torch.float64 else torch.float32
    return x.to(target)


def group_index(group_ids: GroupIds, batch_size: int, device: torch.device | None = None
                ) -> tuple[torch.Tensor, int]:
    """Map group ids to dense indices: ``(inverse[B] long in 0..G-1, G)``.

    ``group_ids`` is a tensor (any dtype ``torch.unique`` accepts) or a sequence of
    hashables (strings, ints, a numpy array of uids as veRL passes).
    """
    if isinstance(group_ids, torch.Tensor):
        if group_ids.dim() != 1 or group_ids.numel() != batch_size:
            raise ValueError(f"group_ids must have shape [{batch_size}], "
                             f"got {tuple(group_ids.shape)}")
        unique, inverse = torch.unique(group_ids, return_inverse=True)
        return inverse.to(device=device, dtype=torch.long), int(unique.numel())
    ids = list(group_ids)
    if len(ids) != batch_size:
        raise ValueError(f"group_ids has {len(ids)} entries for a batch of {batch_size}")
    dense: dict[Any, int] = {}
    inverse_list = [dense.setdefault(g, len(dense)) for g in ids]  # O(B) id → index lookup
    return torch.tensor(inverse_list, dtype=torch.long, device=device), len(dense)


def _group_moments(x: torch.Tensor, inverse: torch.Tensor, num_groups: int
                   ) -> dict[str, torch.Tensor]:
    """Per-group count, mean, population std, min and max of ``x[B]`` (each ``[G]``)."""
    zeros = x.new_zeros(num_groups)
    counts = zeros.index_add(0, inverse, torch.ones_like(x))
    mean = zeros.index_add(0, inverse, x) / counts.clamp_min(1)
    centred = x - mean[inverse]
    # Two-pass variance (Σ(x−mean)²) is exact for identical scores, unlike E[x²]−E[x]².
    std = (zeros.index_add(0, inverse, centred.square()) / counts.clamp_min(1)).sqrt()
    low = torch.full_like(zeros, math.inf).scatter_reduce(0, inverse, x, "amin")
    high = torch.full_like(zeros, -math.inf).scatter_reduce(0, inverse, x, "amax")
    return {"count": counts, "mean": mean, "std": std, "min": low, "max": high}


def _check_scores(scores: torch.Tensor) -> torch.Tensor:
    """``scores`` as float, checked to be ``[B]`` and finite (one host sync on a GPU).

    A NaN would silently zero its group's advantages and ±inf would make them NaN, so
    non-finite scores are an error: callers drop such trajectories first (the GRPO
    trainer does, and counts them as ``reward/non_finite``).
    """
    scores = as_float(scores)
    if scores.dim() != 1:
        raise ValueError(f"scores must have shape [B], got {tuple(scores.shape)}")
    finite = torch.isfinite(scores)
    if not bool(finite.all()):
        rows = (~finite).nonzero().flatten().tolist()
        values = [scores[i].item() for i in rows[:8]]
        raise ValueError(f"scores must be finite: {len(rows)} non-finite score(s) at rows {rows[:8]} "
                         f"(values {values}); drop those trajectories before computing advantages")
    return scores


def _stats_from_moments(m: dict[str, torch.Tensor]) -> dict[str, int]:
    size_one = m["count"] == 1
    flat = (m["count"] > 1) & (m["max"] == m["min"])
    return {
        "num_groups": int(m["count"].numel()),
        "singleton_groups": int(size_one.sum()),
        "zero_spread_groups": int(flat.sum()),
        "all_zero_groups": int(((m["max"] == 0) & (m["min"] == 0)).sum()),
        "all_one_groups": int(((m["max"] == 1) & (m["min"] == 1)).sum()),
    }


def group_stats(scores: torch.Tensor, group_ids: GroupIds) -> dict[str, int]:
    """Saturation counts of a batch's groups, as Python ints.

    ``num_groups``; ``singleton_groups`` (size 1); ``zero_spread_groups`` (size ≥ 2, all
    scores equal); ``all_zero_groups`` / ``all_one_groups`` (every score exactly 0 / 1, any
    size — the saturated groups of binary outcomes). Groups giving ``A = 0`` are
    ``singleton_groups + zero_spread_groups``.
    """
    scores = _check_scores(scores)
    inverse, num_groups = group_index(group_ids, scores.shape[0], scores.device)
    return _stats_from_moments(_group_moments(scores, inverse, num_groups))


def group_advantages(scores: torch.Tensor, group_ids: GroupIds, norm_by_std: bool = True,
                     eps: float = 1e-6, *, return_stats: bool = False
                     ) -> torch.Tensor | tuple[torch.Tensor, dict[str, int]]:
    """GRPO group-normalised outcome advantage, one scalar per trajectory.

    ``A_b = (R_b − mean_g R) / (std_g R + ε)`` with the population std (unbiased=False),
    or ``A_b = R_b − mean_g R`` when ``norm_by_std=False`` (Dr. GRPO). A group of size 1
    or whose scores are all equal gives ``A = 0`` exactly (no ε-amplified rounding noise).
    Unlike veRL's ``grpo`` (which returns R_b for a singleton), this follows DESIGN §3.1.

    Args:
        scores: ``[B]`` outcome scores (any float dtype; detached).
        group_ids: ``[B]`` tensor or sequence of hashables; equal ids share a group.
        norm_by_std: divide by the group std.
        eps: added to the std.
        return_stats: also return :func:`group_stats`' counts.

    Returns:
        ``A[B]`` (float32, float64 for float64 scores), or ``(A, stats)``.

    Raises:
        ValueError: a score is NaN or ±inf (it would zero or poison its whole group).
    """
    scores = _check_scores(scores)
    inverse, num_groups = group_index(group_ids, scores.shape[0], scores.device)
    moments = _group_moments(scores, inverse, num_groups)
    advantages = scores - moments["mean"][inverse]
    if norm_by_std:
        advantages = advantages / (moments["std"][inverse] + eps)
    informative = (moments["count"] > 1) & (moments["max"] > moments["min"])
    advantages = torch.where(informative[inverse], advantages, torch.zeros_like(advantages))
    if return_stats:
        return advantages, _stats_from_moments(moments)
    return advantages


_LENGTH_NORMALIZERS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "linear": lambda length: 1.0 / length,
    "sqrt": torch.rsqrt,
    "none": torch.ones_like,
}


def length_normalizer(mask: torch.Tensor, mode: LengthNorm = "linear") -> torch.Tensor:
    """Per-trajectory length factor ``n(L_b)``, ``L_b = Σ_t mask[b,t]``: ``[B]`` float32.

    ``linear`` 1/L (vanilla GRPO's per-sequence token mean), ``sqrt`` 1/√L (LATA),
    ``none`` 1 (Dr. GRPO; divide the loss by a constant instead). Rows without active
    tokens get 1 (their tokens are masked anyway; this keeps everything finite).
    """
    if mode not in _LENGTH_NORMALIZERS:
        raise ValueError(f"unknown length_norm {mode!r}; "
                         f"choose one of {sorted(_LENGTH_NORMALIZERS)}")
    length = mask.detach().bool().sum(dim=-1).to(torch.float32).clamp_min(1.0)
    return _LENGTH_NORMALIZERS[mode](length)


def _token_positions(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Index k = 0..L−1 of each active token among the active tokens, and L."""
    active = mask.bool()
    return running_count(active) - 1, active.sum(dim=-1)


def _turn_positions(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Turn index j = 0..J−1 of each active token, and J."""
    return segment_ids(mask)


_DISCOUNT_POSITIONS: dict[str, Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]] = {
    "token": _token_positions,
    "turn": _turn_positions,
}
DISCOUNT_UNITS = tuple(_DISCOUNT_POSITIONS)
"""Positions Turn-Discount counts (``DiscountUnit``): ``token`` or ``turn``."""


def turn_discount_weights(mask: torch.Tensor, alpha: float = 1.05,
                          unit: DiscountUnit = "token") -> torch.Tensor:
    """Turn-Discount weights ``w[b,t]``: ``[B, T]`` float32, mean 1 over each row's active tokens.

    ``unit="token"``: the k-th active token (k = 0..L−1) gets ``α^(L−1−k)``;
    ``unit="turn"``: every token of turn j (j = 0..J−1, turns = maximal runs of mask=1)
    gets ``α^(J−1−j)``. Either way the weights are rescaled so that their mean over the
    active tokens is 1; inactive tokens get 0, all-zero rows give zeros.

    Computed in log space, ``log w = e − logsumexp(e) + ln L`` with the exponent taken
    relative to its maximum (``e = (P−1−k)·ln α − max = −d·|ln α|`` with d the integer
    distance to the peak): finite for L = 10⁵ at α = 1.05 (where α^(L−1) overflows), and
    precise, since no two large exponents are subtracted in float32.
    """
    if not (alpha > 0 and math.isfinite(alpha)):
        raise ValueError(f"turn-discount alpha must be a finite positive number, got {alpha}")
    if unit not in _DISCOUNT_POSITIONS:
        raise ValueError(f"unknown turn_discount unit {unit!r}; choose one of {list(DISCOUNT_UNITS)}")
    mask = mask.detach()
    active = mask.bool()
    position, count = _DISCOUNT_POSITIONS[unit](mask)
    log_alpha = math.log(alpha)
    # Exponent relative to the largest weight, from an exact integer distance: the first
    # position (k = 0) is the peak for α ≥ 1, the last (k = P−1) for α < 1.
    distance = position if log_alpha >= 0 else count.unsqueeze(-1) - 1 - position
    exponent = (distance.to(torch.float32) * -abs(log_alpha)).masked_fill(~active, -math.inf)
    length = active.sum(dim=-1).to(torch.float32)
    # The largest exponent is exactly 0, so Σ exp(e) ∈ [1, L]: a plain log-sum is already
    # the stable logsumexp (and several times faster than torch.logsumexp on CPU).
    log_norm = exponent.exp().sum(dim=-1).log() - length.clamp_min(1.0).log()
    log_norm = torch.where(length > 0, log_norm, torch.zeros_like(log_norm))
    return torch.exp(exponent - log_norm.unsqueeze(-1))  # exp(−inf) = 0 off the mask


def turn_credit_tokens(turn_credit: torch.Tensor, mask: torch.Tensor, group_ids: GroupIds,
                       turn_credit_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Group-centred per-turn credit broadcast to tokens: ``[B, T]``.

    ``c_{b,j} = p_{b,j} − mean_{b'∈g(b), b' has turn j} p_{b',j}``, given to every token of
    turn j of row b (turns = maximal runs of mask=1). Row b "has" turn j when
    ``j < J_b`` and ``turn_credit_mask[b,j]`` (if given) is set; other entries get 0.
    Turns beyond ``turn_credit``'s width J get 0 credit.

    Args:
        turn_credit: ``[B, J]`` per-turn scores p (e.g. PRM-Lite step scores).
        mask: ``[B, T]`` response mask.
        group_ids: ``[B]`` group ids, as for :func:`group_advantages`.
        turn_credit_mask: ``[B, J]`` which entries of ``turn_credit`` are real.
    """
    credit = as_float(turn_credit)
    if credit.dim() != 2 or credit.shape[0] != mask.shape[0]:
        raise ValueError(f"turn_credit must have shape [B, J] with B={mask.shape[0]}, "
                         f"got {tuple(credit.shape)}")
    ids, num_turns = segment_ids(mask.detach())
    width = credit.shape[1]
    present = torch.arange(width, device=credit.device).unsqueeze(0) < num_turns.unsqueeze(-1)
    if turn_credit_mask is not None:
        present = present & turn_credit_mask.detach().bool()
    inverse, num_groups = group_index(group_ids, credit.shape[0], credit.device)
    # where, not a product: padding entries of turn_credit may hold NaN
    present_credit = torch.where(present, credit, torch.zeros_like(credit))
    sums = credit.new_zeros(num_groups, width).index_add(0, inverse, present_credit)
    counts = credit.new_zeros(num_groups, width).index_add(0, inverse, present.to(credit.dtype))
    group_mean = sums[inverse] / counts[inverse].clamp_min(1)
    centred = torch.where(present, credit - group_mean, torch.zeros_like(credit))
    return gather_segments(centred, ids)


def token_advantages(adv: torch.Tensor, mask: torch.Tensor, length_norm: LengthNorm = "linear",
                     turn_discount_alpha: float | None = None, *,
                     turn_discount_unit: DiscountUnit = "token",
                     turn_credit: torch.Tensor | None = None,
                     turn_credit_mask: torch.Tensor | None = None,
                     group_ids: GroupIds | None = None,
                     turn_credit_coef: float = 0.0) -> torch.Tensor:
    """Per-token advantage ``Â[b,t] = (A_b + β·c_{b,j(t)}) · n(L_b) · w[b,t] · mask[b,t]``.

    Args:
        adv: ``[B]`` sequence advantages A (from :func:`group_advantages`).
        mask: ``[B, T]`` response mask.
        length_norm: ``n``: ``linear`` (1/L), ``sqrt`` (1/√L, LATA), ``none``.
        turn_discount_alpha: α of the Turn-Discount weights ``w``; None means w ≡ 1.
        turn_discount_unit: ``token`` or ``turn`` (see :func:`turn_discount_weights`).
        turn_credit, turn_credit_mask, group_ids: per-turn PRM credit (see
            :func:`turn_credit_tokens`), added to A *before* n and w so that it travels
            through the same length channel (LATA's 1/√L). Used when
            ``turn_credit_coef`` (β) is non-zero; then ``group_ids`` is required.

    Returns:
        ``[B, T]`` float32 (float64 for float64 ``adv``), zero off the mask.
    """
    adv = as_float(adv)
    if adv.dim() != 1 or adv.shape[0] != mask.shape[0]:
        raise ValueError(f"adv must have shape [B]={mask.shape[0]}, got {tuple(adv.shape)}")
    active = mask.detach().bool()
    per_token = adv.unsqueeze(-1).expand(active.shape)
    if turn_credit is not None and turn_credit_coef != 0.0:
        if group_ids is None:
            raise ValueError("turn_credit needs group_ids to centre the credit within each group")
        credit = turn_credit_tokens(turn_credit, mask, group_ids, turn_credit_mask)
        per_token = per_token + turn_credit_coef * credit.to(adv.dtype)
    scale = length_normalizer(mask, length_norm).to(adv.dtype).unsqueeze(-1)
    if turn_discount_alpha is not None:
        weights = turn_discount_weights(mask, turn_discount_alpha, turn_discount_unit)
        scale = scale * weights.to(adv.dtype)
    return per_token * scale * active.to(adv.dtype)
