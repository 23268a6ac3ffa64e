"""Named advantage estimators: the one variant table (STYLE rule 2).

Every trainer — the native one, the TRL subclass and the veRL plugin — picks an
estimator by name and calls it the same way, so no caller branches on the algorithm:

    est = get_advantage_estimator("lata")
    adv = est(scores, group_ids, response_mask, norm_by_std=True)
    adv.token, adv.sequence, adv.metrics        # [B, T], [B], dict

Signature of every estimator::

    (scores[B], group_ids, response_mask[B, T], *, norm_by_std: bool = True,
     turn_discount_alpha: float | None = None, turn_discount_unit: str = "token",
     turn_credit: Tensor[B, J] | None = None, turn_credit_mask: Tensor[B, J] | None = None,
     turn_credit_coef: float = 0.0, eps: float = 1e-6) -> Advantages

The built-in estimators are data: an :class:`EstimatorPreset` per name (its length
factor, whether it discounts turns, whether it may divide by the group std) over
``group_advantages`` + ``token_advantages``. A preset fixes what defines it (``dr_grpo``
never divides by the std, ``grpo`` never discounts) and takes the rest from the call.
Custom estimators register with :func:`register_advantage_estimator`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import torch

from agentgrpo.algos.advantages import GroupIds, LengthNorm, group_advantages, token_advantages
from agentgrpo.algos.losses import masked_mean

DEFAULT_TURN_DISCOUNT_ALPHA = 1.05


class Advantages(NamedTuple):
    """What an estimator returns: per-token advantages ``token [B, T]`` (zero off the mask),
    the per-trajectory group advantage ``sequence [B]`` (the LLDS preserve set is A ≥ 0),
    and ``metrics`` (``algo/…`` names)."""

    token: torch.Tensor
    sequence: torch.Tensor
    metrics: dict[str, float]


class AdvantageEstimator(Protocol):
    def __call__(self, scores: torch.Tensor, group_ids: GroupIds, response_mask: torch.Tensor, *,
                 norm_by_std: bool = True, turn_discount_alpha: float | None = None,
                 turn_discount_unit: str = "token", turn_credit: torch.Tensor | None = None,
                 turn_credit_mask: torch.Tensor | None = None, turn_credit_coef: float = 0.0,
                 eps: float = 1e-6) -> Advantages: ...


@dataclass(frozen=True)
class EstimatorPreset:
    """What a built-in estimator's name fixes."""

    length_norm: LengthNorm
    """n(L) inside the token advantage: linear 1/L, sqrt 1/√L (LATA), none."""
    turn_discount: bool
    """Whether Turn-Discount weights α^(L−1−k) apply (α from the call, default 1.05)."""
    norm_by_std: bool | None = None
    """None: the caller's ``norm_by_std``; False: never divide by the std (Dr. GRPO)."""
    summary: str = ""


PRESETS: dict[str, EstimatorPreset] = {
    "grpo": EstimatorPreset("linear", False, summary="vanilla GRPO, Â = A/L"),
    "lata": EstimatorPreset("sqrt", False, summary="LATA, Â = A/√L"),
    "turn_discount": EstimatorPreset("linear", True, summary="Turn-Discount, Â = A/L · w"),
    "turn_discount_lata": EstimatorPreset("sqrt", True, summary="Turn-Discount + LATA, Â = A/√L · w"),
    "dr_grpo": EstimatorPreset("none", False, norm_by_std=False,
                               summary="Dr. GRPO (arXiv:2503.20783), Â = R − mean_g R"),
}

_ESTIMATORS: dict[str, AdvantageEstimator] = {}


def register_advantage_estimator(name: str) -> Callable[[AdvantageEstimator], AdvantageEstimator]:
    """Decorator registering an estimator under ``name``.

    Registering a different function under a taken name raises ValueError.
    """
    def decorate(fn: AdvantageEstimator) -> AdvantageEstimator:
        existing = _ESTIMATORS.get(name)
        if existing is not None and existing is not fn:
            raise ValueError(f"advantage estimator {name!r} is already registered ({existing!r})")
        _ESTIMATORS[name] = fn
        return fn
    return decorate


def get_advantage_estimator(name: str) -> AdvantageEstimator:
    """The estimator registered under ``name``; unknown names raise with the registered ones."""
    try:
        return _ESTIMATORS[name]
    except KeyError:
        raise ValueError(f"unknown advantage estimator {name!r}; registered: "
                         f"{sorted(_ESTIMATORS)}") from None


def advantage_estimator_names() -> list[str]:
    return sorted(_ESTIMATORS)


def estimator_length_norm(name: str) -> LengthNorm | None:
    """The length factor a named estimator puts into its token advantages (None: unknown,
    e.g. a custom estimator). A trainer uses it to refuse dividing by L a second time."""
    preset = PRESETS.get(name)
    return preset.length_norm if preset is not None else None


LENGTH_DIVIDING_AGGS = ("token-mean", "seq-mean-token-mean")
"""Loss aggregations that divide by the response length (or the batch's token count)."""


def check_loss_pairing(estimator: str, loss_agg: str, *, estimator_key: str = "adv_estimator",
                       loss_agg_key: str = "loss_agg", name_prefix: str = "") -> None:
    """Refuse an aggregation that divides by the response length a second time.

    An estimator whose token advantage already carries ``1/L`` (``grpo``) or ``1/√L``
    (``lata``) paired with ``token-mean`` / ``seq-mean-token-mean`` divides by the length
    twice. Every trainer calls this with its own spelling of the two settings
    (``estimator_key``, ``loss_agg_key``, and ``name_prefix`` where the host names the
    registry's estimators differently, e.g. veRL's ``agentgrpo_``), so the message names
    what to change there.

    Raises:
        ValueError: one line naming both settings and the fix.
    """
    norm = estimator_length_norm(estimator)
    if norm in ("linear", "sqrt") and loss_agg in LENGTH_DIVIDING_AGGS:
        raise ValueError(
            f"{loss_agg_key}={loss_agg} with {estimator_key}={name_prefix}{estimator} divides by the response "
            f"length twice (the advantage already carries a {norm} length factor): set {loss_agg_key}="
            f"seq-mean-token-sum, or {estimator_key}={name_prefix}dr_grpo")


def _advantage_metrics(adv: torch.Tensor, token_adv: torch.Tensor, mask: torch.Tensor,
                       stats: dict[str, int]) -> dict[str, float]:
    active = mask.detach().bool()
    has_adv = adv.numel() > 0
    values = torch.stack([
        adv.mean() if has_adv else adv.new_zeros(()),
        adv.std(unbiased=False) if has_adv else adv.new_zeros(()),
        adv.abs().max() if has_adv else adv.new_zeros(()),
        masked_mean(token_adv, active),
        torch.where(active, token_adv.abs(), torch.zeros_like(token_adv)).amax()
        if token_adv.numel() else token_adv.new_zeros(()),
    ]).tolist()
    groups = max(stats["num_groups"], 1)
    metrics = dict(zip(("algo/adv_mean", "algo/adv_std", "algo/adv_abs_max",
                        "algo/token_adv_mean", "algo/token_adv_abs_max"), values))
    metrics.update({
        "algo/groups": stats["num_groups"],
        "algo/groups_singleton": stats["singleton_groups"],
        "algo/groups_zero_spread": stats["zero_spread_groups"],
        "algo/groups_all_zero": stats["all_zero_groups"],
        "algo/groups_all_one": stats["all_one_groups"],
        "algo/saturated_group_frac": (stats["all_zero_groups"] + stats["all_one_groups"]) / groups,
        "algo/zero_adv_group_frac":
            (stats["singleton_groups"] + stats["zero_spread_groups"]) / groups,
    })
    return metrics


def _preset_estimator(name: str, preset: EstimatorPreset) -> AdvantageEstimator:
    def estimator(scores, group_ids, response_mask, *, norm_by_std=True, turn_discount_alpha=None,
                  turn_discount_unit="token", turn_credit=None, turn_credit_mask=None,
                  turn_credit_coef=0.0, eps=1e-6) -> Advantages:
        by_std = norm_by_std if preset.norm_by_std is None else preset.norm_by_std
        alpha = None
        if preset.turn_discount:
            alpha = DEFAULT_TURN_DISCOUNT_ALPHA if turn_discount_alpha is None else turn_discount_alpha
        adv, stats = group_advantages(scores, group_ids, by_std, eps, return_stats=True)
        token_adv = token_advantages(
            adv, response_mask, preset.length_norm, alpha, turn_discount_unit=turn_discount_unit,
            turn_credit=turn_credit, turn_credit_mask=turn_credit_mask, group_ids=group_ids,
            turn_credit_coef=turn_credit_coef)
        return Advantages(token_adv, adv, _advantage_metrics(adv, token_adv, response_mask, stats))

    estimator.__name__ = estimator.__qualname__ = name
    estimator.__doc__ = f"{preset.summary} (preset {preset})."
    return estimator


for _name, _preset in PRESETS.items():
    register_advantage_estimator(_name)(_preset_estimator(_name, _preset))
