"""Named advantage estimators with one signature (STYLE rule 2).

The trainer and the framework plugins pick an estimator by name and call it the same
way whatever the variant, so no caller branches on the algorithm:

    fn = get_advantage_estimator("lata")
    token_adv, metrics = fn(scores, group_ids, response_mask, norm_by_std=True,
                            turn_discount_alpha=None)

Signature of every estimator::

    (scores[B], group_ids, response_mask[B, T], *, norm_by_std: bool = True,
     turn_discount_alpha: float | None = None, turn_discount_unit: str = "token",
     turn_credit: Tensor[B, J] | None = None, turn_credit_mask: Tensor[B, J] | None = None,
     turn_credit_coef: float = 0.0, eps: float = 1e-6) -> (token_adv[B, T], metrics)

The built-in ones are thin presets over ``group_advantages`` + ``token_advantages``; a
preset fixes what defines it (e.g. ``dr_grpo`` never divides by the std and ``grpo`` never
discounts) and uses the remaining arguments as given.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

from agentgrpo.algos.advantages import GroupIds, group_advantages, token_advantages
from agentgrpo.algos.losses import masked_mean

DEFAULT_TURN_DISCOUNT_ALPHA = 1.05


class AdvantageEstimator(Protocol):
    def __call__(self, scores: torch.Tensor, group_ids: GroupIds, response_mask: torch.Tensor, *,
                 norm_by_std: bool = True, turn_discount_alpha: float | None = None,
                 turn_discount_unit: str = "token", turn_credit: torch.Tensor | None = None,
                 turn_credit_mask: torch.Tensor | None = None, turn_credit_coef: float = 0.0,
                 eps: float = 1e-6) -> tuple[torch.Tensor, dict]: ...


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


def _preset(scores, group_ids, response_mask, *, norm_by_std, length_norm, turn_discount_alpha,
            turn_discount_unit, turn_credit, turn_credit_mask, turn_credit_coef, eps):
    adv, stats = group_advantages(scores, group_ids, norm_by_std, eps, return_stats=True)
    token_adv = token_advantages(
        adv, response_mask, length_norm, turn_discount_alpha,
        turn_discount_unit=turn_discount_unit, turn_credit=turn_credit,
        turn_credit_mask=turn_credit_mask, group_ids=group_ids, turn_credit_coef=turn_credit_coef)
    return token_adv, _advantage_metrics(adv, token_adv, response_mask, stats)


def _alpha_or_default(alpha: float | None) -> float:
    return DEFAULT_TURN_DISCOUNT_ALPHA if alpha is None else alpha


@register_advantage_estimator("grpo")
def grpo(scores, group_ids, response_mask, *, norm_by_std=True, turn_discount_alpha=None,
         turn_discount_unit="token", turn_credit=None, turn_credit_mask=None,
         turn_credit_coef=0.0, eps=1e-6):
    """Vanilla GRPO: ``Â = A/L`` (no turn discount; ``turn_discount_alpha`` is ignored)."""
    return _preset(scores, group_ids, response_mask, norm_by_std=norm_by_std, length_norm="linear",
                   turn_discount_alpha=None, turn_discount_unit=turn_discount_unit,
                   turn_credit=turn_credit, turn_credit_mask=turn_credit_mask,
                   turn_credit_coef=turn_credit_coef, eps=eps)


@register_advantage_estimator("lata")
def lata(scores, group_ids, response_mask, *, norm_by_std=True, turn_discount_alpha=None,
         turn_discount_unit="token", turn_credit=None, turn_credit_mask=None,
         turn_credit_coef=0.0, eps=1e-6):
    """LATA: ``Â = A/√L`` (no turn discount; ``turn_discount_alpha`` is ignored)."""
    return _preset(scores, group_ids, response_mask, norm_by_std=norm_by_std, length_norm="sqrt",
                   turn_discount_alpha=None, turn_discount_unit=turn_discount_unit,
                   turn_credit=turn_credit, turn_credit_mask=turn_credit_mask,
                   turn_credit_coef=turn_credit_coef, eps=eps)


@register_advantage_estimator("turn_discount")
def turn_discount(scores, group_ids, response_mask, *, norm_by_std=True, turn_discount_alpha=None,
                  turn_discount_unit="token", turn_credit=None, turn_credit_mask=None,
                  turn_credit_coef=0.0, eps=1e-6):
    """Turn-Discount: ``Â = A/L · w`` with ``w ∝ α^(L−1−k)`` (α defaults to 1.05)."""
    return _preset(scores, group_ids, response_mask, norm_by_std=norm_by_std, length_norm="linear",
                   turn_discount_alpha=_alpha_or_default(turn_discount_alpha),
                   turn_discount_unit=turn_discount_unit, turn_credit=turn_credit,
                   turn_credit_mask=turn_credit_mask, turn_credit_coef=turn_credit_coef, eps=eps)


@register_advantage_estimator("turn_discount_lata")
def turn_discount_lata(scores, group_ids, response_mask, *, norm_by_std=True,
                       turn_discount_alpha=None, turn_discount_unit="token", turn_credit=None,
                       turn_credit_mask=None, turn_credit_coef=0.0, eps=1e-6):
    """Turn-Discount with LATA's length factor: ``Â = A/√L · w`` (α defaults to 1.05)."""
    return _preset(scores, group_ids, response_mask, norm_by_std=norm_by_std, length_norm="sqrt",
                   turn_discount_alpha=_alpha_or_default(turn_discount_alpha),
                   turn_discount_unit=turn_discount_unit, turn_credit=turn_credit,
                   turn_credit_mask=turn_credit_mask, turn_credit_coef=turn_credit_coef, eps=eps)


@register_advantage_estimator("dr_grpo")
def dr_grpo(scores, group_ids, response_mask, *, norm_by_std=True, turn_discount_alpha=None,
            turn_discount_unit="token", turn_credit=None, turn_credit_mask=None,
            turn_credit_coef=0.0, eps=1e-6):
    """Dr. GRPO (arXiv:2503.20783): ``Â = R − mean_g R``, no std, no length factor.

    ``norm_by_std`` and ``turn_discount_alpha`` are ignored; pair it with the constant
    normaliser ``agg="seq-mean-token-sum-norm"``.
    """
    return _preset(scores, group_ids, response_mask, norm_by_std=False, length_norm="none",
                   turn_discount_alpha=None, turn_discount_unit=turn_discount_unit,
                   turn_credit=turn_credit, turn_credit_mask=turn_credit_mask,
                   turn_credit_coef=turn_credit_coef, eps=eps)
