"""veRL advantage estimators backed by ``agentgrpo.algos`` (``algorithm.adv_estimator``).

=============================== ============ ============= ==========================
``algorithm.adv_estimator``     length norm  turn discount agentgrpo variant
=============================== ============ ============= ==========================
``agentgrpo_grpo``              1/L          no            vanilla GRPO (``Â = A/L``)
``agentgrpo_lata``              1/√L         no            LATA
``agentgrpo_turn_discount``     1/L          α^(L−1−k)     Turn-Discount
``agentgrpo_turn_discount_lata``1/√L         α^(L−1−k)     Turn-Discount + LATA
=============================== ============ ============= ==========================

Each is called by veRL as ``fn(token_level_rewards, response_mask, config, index)`` and
returns per-token advantages ``(advantages, returns)``, both ``[bs, response_length]``
(veRL allows per-token values). The math is ``agentgrpo.algos.group_advantages`` then
``agentgrpo.algos.token_advantages``; nothing is re-implemented here.

Settings, from ``algorithm.<key>`` (add with ``+algorithm.<key>=...``) or else the
environment variable ``AGENTGRPO_<KEY>`` (see ``settings``):

* ``norm_adv_by_std_in_grpo`` (veRL's own key, default true): divide by the group std;
* ``length_norm``: ``linear`` | ``sqrt`` | ``none``, overriding the estimator's default;
* ``turn_discount_alpha`` (default 1.05) and ``turn_discount_unit`` (``token`` | ``turn``)
  for the Turn-Discount estimators (the other two ignore them, like the algos presets).

Semantics at the boundary: the outcome score sits on the last response token of
``token_level_rewards``; we take the row sum, as veRL's ``grpo`` does (equal to that
score, plus the per-token KL penalty when ``use_kl_in_reward`` is on). Group ids are
``index`` (veRL's per-prompt ``uid``). Unlike veRL's ``grpo``, a group of size 1 gets
advantage 0 (DESIGN §3.1). The length factor lives in the advantage, so pair these
estimators with ``actor.loss_agg_mode=seq-mean-token-sum`` for the seed's GRPO objective
(``token-mean`` would divide by the length a second time). Per-turn PRM credit
(``prm_credit: turn``) needs per-turn scores veRL does not pass to estimators, so it is
not offered here; the PRM-Lite score reaches veRL through the reward (``reward.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from agentgrpo.algos import group_advantages, token_advantages
from agentgrpo.algos.registry import DEFAULT_TURN_DISCOUNT_ALPHA
from agentgrpo.integrations.verl.settings import as_bool, choice, setting

LENGTH_NORMS = ("linear", "sqrt", "none")
DISCOUNT_UNITS = ("token", "turn")


@dataclass(frozen=True)
class EstimatorPreset:
    """What an estimator name fixes: its default length factor and whether it discounts."""

    length_norm: str
    turn_discount: bool


PRESETS: dict[str, EstimatorPreset] = {
    "agentgrpo_grpo": EstimatorPreset("linear", turn_discount=False),
    "agentgrpo_lata": EstimatorPreset("sqrt", turn_discount=False),
    "agentgrpo_turn_discount": EstimatorPreset("linear", turn_discount=True),
    "agentgrpo_turn_discount_lata": EstimatorPreset("sqrt", turn_discount=True),
}


@dataclass(frozen=True)
class EstimatorSettings:
    """The keyword arguments one estimator call hands to ``agentgrpo.algos``."""

    norm_by_std: bool
    length_norm: str
    turn_discount_alpha: float | None
    turn_discount_unit: str


def estimator_settings(name: str, config: Any) -> EstimatorSettings:
    """Resolve the settings of estimator ``name`` from veRL's ``algorithm`` config / env."""
    preset = PRESETS[name]
    alpha = None
    if preset.turn_discount:
        alpha = setting(config, "turn_discount_alpha", DEFAULT_TURN_DISCOUNT_ALPHA, float)
    return EstimatorSettings(
        norm_by_std=setting(config, "norm_adv_by_std_in_grpo", True, as_bool),
        length_norm=setting(config, "length_norm", preset.length_norm, choice(LENGTH_NORMS)),
        turn_discount_alpha=alpha,
        turn_discount_unit=setting(config, "turn_discount_unit", "token", choice(DISCOUNT_UNITS)),
    )


def verl_token_advantages(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    index: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(advantages, returns)`` of estimator ``name``, both ``[bs, response_length]``.

    Args:
        token_level_rewards: ``[bs, T]``, the outcome on the last response token.
        response_mask: ``[bs, T]``, 1 on tokens the policy generated (multi-turn: one run
            of ones per assistant turn, which Turn-Discount by turn uses).
        config: veRL's ``algorithm`` config (or None: environment / defaults).
        index: ``[bs]`` group ids (numpy array of uids).
    """
    if index is None:
        raise ValueError(
            f"{name} needs the group ids: veRL passes them as `index` when the batch "
            "has a `uid` field (set actor_rollout_ref.rollout.n > 1)"
        )
    settings = estimator_settings(name, config)
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)  # [bs]
        adv = group_advantages(scores, index, norm_by_std=settings.norm_by_std)  # [bs]
        token_adv = token_advantages(
            adv,
            response_mask,
            settings.length_norm,
            settings.turn_discount_alpha,
            turn_discount_unit=settings.turn_discount_unit,
        )  # [bs, T]
    return token_adv, token_adv


def agentgrpo_grpo(token_level_rewards, response_mask, config=None, index=None, **kwargs):
    """Vanilla GRPO, ``Â = A/L`` (see the module docstring for the signature)."""
    return verl_token_advantages(
        "agentgrpo_grpo", token_level_rewards, response_mask, config, index
    )


def agentgrpo_lata(token_level_rewards, response_mask, config=None, index=None, **kwargs):
    """LATA, ``Â = A/√L``."""
    return verl_token_advantages(
        "agentgrpo_lata", token_level_rewards, response_mask, config, index
    )


def agentgrpo_turn_discount(token_level_rewards, response_mask, config=None, index=None, **kwargs):
    """Turn-Discount, ``Â = A/L · w`` with ``w ∝ α^(L−1−k)``, mean 1."""
    return verl_token_advantages(
        "agentgrpo_turn_discount", token_level_rewards, response_mask, config, index
    )


def agentgrpo_turn_discount_lata(
    token_level_rewards, response_mask, config=None, index=None, **kwargs
):
    """Turn-Discount with LATA's length factor, ``Â = A/√L · w``."""
    return verl_token_advantages(
        "agentgrpo_turn_discount_lata", token_level_rewards, response_mask, config, index
    )


ESTIMATORS = {
    "agentgrpo_grpo": agentgrpo_grpo,
    "agentgrpo_lata": agentgrpo_lata,
    "agentgrpo_turn_discount": agentgrpo_turn_discount,
    "agentgrpo_turn_discount_lata": agentgrpo_turn_discount_lata,
}
