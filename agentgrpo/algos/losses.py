"""Loss aggregation, the clipped policy-gradient loss and KL penalties (DESIGN §3.5–3.6).

Every loss here builds a per-token matrix ``[B, T]`` and hands it, with the response
mask, to :func:`agg_loss` — the one place that decides how tokens and sequences are
weighted (so "length bias" is one string, as in veRL's ``core_algos.agg_loss``).
Losses return ``(loss, metrics)``: a 0-d float32 tensor and a dict of Python floats.
Gradients flow only through ``logp``; ``old_logp``, ``ref_logp`` and advantages are
treated as constants. Internally everything runs in float32 (bfloat16 inputs are
upcast; the gradient reaches them through the cast).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal, Union

import torch

from agentgrpo.algos.advantages import as_float

Number = Union[int, float, torch.Tensor]  # noqa: UP007 (a runtime alias)
AggMode = Literal["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
                  "seq-mean-token-sum-norm"]
Importance = Literal["token", "sequence"]
KLKind = Literal["k1", "k2", "k3", "abs", "low_var_kl", "kl", "mse"]
DEFAULT_LOSS_AGG: AggMode = "seq-mean-token-sum"
"""The seed's policy-gradient aggregation: with A/L in the advantage, GRPO's seq-mean-token-mean."""

# log-ratios are clamped before exp (as veRL does) so a stale or corrupt old_logp
# cannot overflow the ratio; beyond the clamp the token simply stops contributing gradient.
LOG_RATIO_CLAMP = 20.0


def _check_denominator(name: str, value: Number | None) -> None:
    """Reject a negative, NaN or infinite denominator, naming it.

    Python numbers and CPU tensors are checked (no device sync); tensors on an
    accelerator are not, since reading one back would stall the GPU on every call.
    """
    if value is None:
        return
    if isinstance(value, torch.Tensor):
        if value.device.type != "cpu":
            return
        bad = bool((~torch.isfinite(value) | (value < 0)).any())
    else:
        bad = not math.isfinite(value) or value < 0
    if bad:
        raise ValueError(f"agg_loss: {name} must be a finite number >= 0, got {value!r}")


def _denominator(value: Number | None, default: torch.Tensor) -> torch.Tensor:
    """A loss denominator as a tensor; 0 becomes 1 (the numerator is then 0 too: no NaN)."""
    den = default if value is None else torch.as_tensor(value, dtype=default.dtype,
                                                        device=default.device)
    return torch.where(den != 0, den, torch.ones_like(den))


def _token_mean(masked, weight, num_tokens, num_seqs, horizon):
    return masked.sum() / _denominator(num_tokens, weight.sum())


def _token_sum(masked, weight, num_tokens, num_seqs, horizon):
    return masked.sum()


def _seq_mean_token_sum(masked, weight, num_tokens, num_seqs, horizon):
    return masked.sum() / _denominator(num_seqs, weight.new_tensor(float(weight.shape[0])))


def _seq_mean_token_mean(masked, weight, num_tokens, num_seqs, horizon):
    seq_tokens = weight.sum(dim=-1)
    per_seq = masked.sum(dim=-1) / _denominator(None, seq_tokens)  # empty rows: 0 / 1 = 0
    return per_seq.sum() / _denominator(num_seqs, weight.new_tensor(float(weight.shape[0])))


def _seq_mean_token_sum_norm(masked, weight, num_tokens, num_seqs, horizon):
    seqs = _denominator(num_seqs, weight.new_tensor(float(weight.shape[0])))
    return masked.sum() / (seqs * _denominator(horizon, weight.new_tensor(float(weight.shape[-1]))))


_AGG_MODES: dict[str, Callable[..., torch.Tensor]] = {
    "token-mean": _token_mean,
    "token-sum": _token_sum,
    "seq-mean-token-sum": _seq_mean_token_sum,
    "seq-mean-token-mean": _seq_mean_token_mean,
    "seq-mean-token-sum-norm": _seq_mean_token_sum_norm,
}
AGG_MODES = tuple(_AGG_MODES)


def agg_loss(loss_mat: torch.Tensor, mask: torch.Tensor, mode: AggMode | str, *,
             num_tokens: Number | None = None, num_seqs: Number | None = None,
             horizon: Number | None = None) -> torch.Tensor:
    """Reduce a per-token loss ``[B, T]`` to a scalar over the active tokens of ``mask``.

    Modes (veRL's ``loss_agg_mode`` names):
      - ``token-mean``: ``Σ_bt ℓ·m / num_tokens`` (default ``Σ m``; DAPO / TRL "dapo").
      - ``token-sum``: ``Σ_bt ℓ·m`` (veRL 0.9).
      - ``seq-mean-token-sum``: ``Σ_b Σ_t ℓ·m / num_seqs`` (default B).
      - ``seq-mean-token-mean``: ``Σ_b (Σ_t ℓ·m / Σ_t m) / num_seqs`` (default B; rows
        without tokens contribute 0) — the original GRPO per-sequence mean.
      - ``seq-mean-token-sum-norm``: ``Σ_bt ℓ·m / (num_seqs · horizon)``, horizon
        defaulting to T: Dr. GRPO's constant normaliser (TRL "dr_grpo" divides by
        B · max_completion_length). veRL computes the same quantity as its
        seq-mean-token-sum divided by ``loss_scale_factor`` (default: the response length).

    The optional denominators are the full mini-batch's counts: a trainer that splits a
    mini-batch into micro-batches and passes them to every micro-batch gets, summed over
    micro-batches, exactly the full mini-batch's loss and gradient (veRL 0.7+'s
    ``global_batch_info``). Note veRL 0.9.1's seq-mean default counts only rows with
    active tokens; here the default is B — pass ``num_seqs`` to choose. A denominator of 0
    is replaced by 1 (its numerator is then 0): the loss is 0, never NaN. A negative or
    non-finite denominator raises ``ValueError`` (checked for Python numbers and CPU
    tensors; GPU tensors are not read back, to keep the call free of device syncs).

    Returns a 0-d float32 tensor (float64 for float64 input).
    """
    if mode not in _AGG_MODES:
        raise ValueError(f"unknown loss aggregation mode {mode!r}; valid modes: {list(_AGG_MODES)}")
    if loss_mat.shape != mask.shape:
        raise ValueError(f"loss_mat {tuple(loss_mat.shape)} and mask {tuple(mask.shape)} differ")
    for name, value in (("num_tokens", num_tokens), ("num_seqs", num_seqs), ("horizon", horizon)):
        _check_denominator(name, value)
    dtype = torch.float64 if loss_mat.dtype == torch.float64 else torch.float32
    weight = mask.detach().to(dtype)
    # where, not a product: inf/NaN on masked positions (e.g. padding) must not leak in.
    masked = torch.where(weight != 0, loss_mat.to(dtype) * weight, torch.zeros_like(weight))
    return _AGG_MODES[mode](masked, weight, num_tokens, num_seqs, horizon)


def masked_mean(values: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` over ``active`` (bool) entries; 0 when there are none."""
    total = torch.where(active, values, torch.zeros_like(values)).sum()
    return total / active.sum().clamp_min(1)


def _token_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor,
                     active: torch.Tensor) -> torch.Tensor:
    """Per-token ``log ρ_t = logp_t − old_logp_t`` (PPO); 0 off the mask."""
    log_ratio = (logp - old_logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    # where, so that garbage (NaN, ±inf) on padding gets an exact-zero gradient
    return torch.where(active, log_ratio, torch.zeros_like(log_ratio))


def _sequence_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor,
                        active: torch.Tensor) -> torch.Tensor:
    """GSPO (Zheng et al. 2025, arXiv:2507.18071): ``log s_i = mean_t(logp − old_logp)``.

    Token-level form ``s_{i,t} = sg[s_i] · exp(logp_t − sg[logp_t])``: its value is the
    sequence ratio (the geometric mean of the token ratios) and its gradient flows per token.
    """
    diff = torch.where(active, logp - old_logp, torch.zeros_like(logp))
    seq_log = diff.sum(dim=-1) / active.sum(dim=-1).clamp_min(1)
    seq_log = seq_log.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).detach()
    token_form = logp - logp.detach() + seq_log.unsqueeze(-1)
    return torch.where(active, token_form, torch.zeros_like(token_form))


_IMPORTANCE: dict[str, Callable[..., torch.Tensor]] = {
    "token": _token_log_ratio,
    "sequence": _sequence_log_ratio,
}
IMPORTANCE_LEVELS = tuple(_IMPORTANCE)
"""PPO ratio levels (``Importance``): per ``token``, or GSPO's per ``sequence``."""


def _policy_metrics(ratio, unclipped, clipped, adv, log_ratio_k1, active, clip_low, clip_high):
    """Clip fractions (veRL's definition: the clipped term was strictly larger), KL, ratio stats."""
    # ratios are positive, so a 0 fill gives the max over active tokens (0 when none)
    ratio_on = torch.where(active, ratio, torch.zeros_like(ratio))
    values = torch.stack([
        masked_mean((clipped > unclipped).float(), active),
        masked_mean(((ratio < 1 - clip_low) & (adv < 0)).float(), active),
        masked_mean(((ratio > 1 + clip_high) & (adv > 0)).float(), active),
        masked_mean(-log_ratio_k1, active),
        masked_mean(ratio, active),
        ratio_on.amax() if ratio_on.numel() else ratio.new_zeros(()),
    ]).tolist()  # one host sync for all metrics
    names = ("pg_clipfrac", "pg_clipfrac_lower", "pg_clipfrac_upper", "ppo_kl", "ratio_mean",
             "ratio_max")
    return dict(zip(names, values))


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, token_adv: torch.Tensor,
                mask: torch.Tensor, clip_low: float = 0.2, clip_high: float = 0.2,
                agg: AggMode | str = DEFAULT_LOSS_AGG,
                importance: Importance | str = "token", *,
                num_tokens: Number | None = None, num_seqs: Number | None = None,
                horizon: Number | None = None,
                rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """PPO-clip policy loss with decoupled clip ranges (DAPO, arXiv:2503.14476).

    ``ρ = exp(logp − old_logp)`` (``importance="sequence"``: GSPO's per-sequence ratio
    ``exp(mean_t(logp − old_logp))`` broadcast to the tokens);
    ``ℓ[b,t] = max(−Â·ρ, −Â·clip(ρ, 1−ε_low, 1+ε_high))``, reduced by :func:`agg_loss`.
    Length normalisation is *not* applied here: ``token_adv`` carries it (vanilla GRPO is
    ``length_norm="linear"`` + ``seq-mean-token-sum``, LATA is ``"sqrt"``).

    Args:
        logp, old_logp: ``[B, T]`` log-probs under the current / behaviour policy.
        token_adv: ``[B, T]`` per-token advantages (:func:`token_advantages`).
        mask: ``[B, T]`` response mask.
        clip_low, clip_high: ε_low, ε_high.
        agg, num_tokens, num_seqs, horizon: passed to :func:`agg_loss`.
        rollout_is_weights: optional ``[B, T]`` multiplicative weights (e.g. veRL's
            rollout-correction importance weights), treated as constants.

    Returns:
        ``(loss, metrics)``; metrics: ``pg_clipfrac`` (share of active tokens whose
        clipped term was taken), ``pg_clipfrac_lower`` (ρ < 1−ε_low with Â < 0),
        ``pg_clipfrac_upper`` (ρ > 1+ε_high with Â > 0), ``ppo_kl`` (mean of
        old_logp − logp), ``ratio_mean``, ``ratio_max`` over active tokens.
    """
    if importance not in _IMPORTANCE:
        raise ValueError(f"unknown importance {importance!r}; choose one of {sorted(_IMPORTANCE)}")
    if not (0.0 <= clip_low < 1.0 and clip_high >= 0.0):
        raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0, got {clip_low}, {clip_high}")
    if not (logp.shape == old_logp.shape == token_adv.shape == mask.shape):
        raise ValueError("logp, old_logp, token_adv and mask must share one [B, T] shape, got "
                         f"{[tuple(t.shape) for t in (logp, old_logp, token_adv, mask)]}")
    current = logp.to(torch.float64 if logp.dtype == torch.float64 else torch.float32)
    old, adv = as_float(old_logp).to(current.dtype), as_float(token_adv).to(current.dtype)
    active = mask.detach().bool()
    ratio = torch.exp(_IMPORTANCE[importance](current, old, active))
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss_mat = torch.maximum(unclipped, clipped)
    if rollout_is_weights is not None:
        loss_mat = loss_mat * as_float(rollout_is_weights).to(current.dtype)
    loss = agg_loss(loss_mat, mask, agg, num_tokens=num_tokens, num_seqs=num_seqs, horizon=horizon)
    with torch.no_grad():
        metrics = _policy_metrics(ratio.detach(), unclipped.detach(), clipped.detach(), adv,
                                  (current.detach() - old), active, clip_low, clip_high)
    return loss, metrics


def _k1(log_ratio: torch.Tensor) -> torch.Tensor:
    return log_ratio


def _k2(log_ratio: torch.Tensor) -> torch.Tensor:
    return 0.5 * log_ratio.square()


def _k3(log_ratio: torch.Tensor) -> torch.Tensor:
    # Schulman's unbiased low-variance estimator with r = ref/π: r − log r − 1 ≥ 0.
    ref_minus_logp = (-log_ratio).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return (torch.exp(ref_minus_logp) - ref_minus_logp - 1.0).clamp(-10.0, 10.0)


_KL_KINDS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "k1": _k1, "kl": _k1,
    "k2": _k2, "mse": _k2,
    "k3": _k3, "low_var_kl": _k3,
    "abs": torch.abs,
}
KL_KINDS = tuple(_KL_KINDS)


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor,
               kind: KLKind | str = "k1") -> torch.Tensor:
    """Per-token KL estimate of the policy to the reference: ``[B, T]`` float32.

    With ``x = logp − ref_logp`` (Schulman 2020, "Approximating KL divergence"):
    ``k1`` = x; ``k2`` = ½x²; ``k3`` (veRL's ``low_var_kl``) = ``exp(−x) + x − 1``, its
    input clamped to [−20, 20] so exp cannot overflow and its output to [−10, 10];
    ``abs`` = |x|. Aliases: ``kl`` = k1, ``mse`` = k2, ``low_var_kl`` = k3. Gradients
    flow through ``logp`` only. Reduce with :func:`agg_loss`.
    """
    if kind not in _KL_KINDS:
        raise ValueError(f"unknown KL kind {kind!r}; choose one of {sorted(_KL_KINDS)}")
    current = logp.to(torch.float64 if logp.dtype == torch.float64 else torch.float32)
    return _KL_KINDS[kind](current - as_float(ref_logp).to(current.dtype))
