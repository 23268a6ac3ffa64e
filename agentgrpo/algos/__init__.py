"""agentgrpo.algos: the numerical core — pure, vectorised torch, no I/O (DESIGN §3).

Advantages (GRPO / Dr. GRPO group normalisation, LATA's 1/√L, Turn-Discount weights,
per-turn PRM credit), the PPO-clip policy loss (token or GSPO sequence ratio), KL
penalties, the LLDS regulariser, the one loss aggregation function, log-probs and
entropies from logits, the registry of named advantage estimators (the one variant
table), ``grpo_objective`` (the one loss, ``L_pg + β·KL + λ·L_LLDS − c_H·H``) and
``ObjectiveSettings`` (its settings and their defaults, one object for every trainer). The
native trainer, the veRL plugins and the TRL integration all call these; nothing here
imports from the rest of the package.
"""
from __future__ import annotations

from agentgrpo.algos.advantages import (
    DISCOUNT_UNITS,
    DiscountUnit,
    LengthNorm,
    group_advantages,
    group_index,
    group_stats,
    length_normalizer,
    token_advantages,
    turn_credit_tokens,
    turn_discount_weights,
)
from agentgrpo.algos.llds import GATES, Gate, llds_loss, preserve_set
from agentgrpo.algos.logprob import entropy_from_logits, logprobs_from_logits
from agentgrpo.algos.losses import (
    AGG_MODES,
    DEFAULT_LOSS_AGG,
    IMPORTANCE_LEVELS,
    KL_KINDS,
    AggMode,
    Importance,
    KLKind,
    agg_loss,
    kl_penalty,
    masked_mean,
    policy_loss,
)
from agentgrpo.algos.objective import OBJECTIVE_METRICS, grpo_objective, preserve_token_count
from agentgrpo.algos.registry import (
    LENGTH_DIVIDING_AGGS,
    PRESETS,
    Advantages,
    EstimatorPreset,
    advantage_estimator_names,
    check_loss_pairing,
    estimator_length_norm,
    get_advantage_estimator,
    register_advantage_estimator,
)
from agentgrpo.algos.segments import segment_ids, segment_sum
from agentgrpo.algos.settings import ObjectiveSettings, updates_per_rollout
from agentgrpo.algos.token_mask import DISALLOWED_LOGIT, TokenMasks, restrict_logits, unpack_allowed

__all__ = [
    "AGG_MODES",
    "DISALLOWED_LOGIT",
    "DEFAULT_LOSS_AGG",
    "DISCOUNT_UNITS",
    "GATES",
    "IMPORTANCE_LEVELS",
    "KL_KINDS",
    "LENGTH_DIVIDING_AGGS",
    "OBJECTIVE_METRICS",
    "PRESETS",
    "TokenMasks",
    "Advantages",
    "AggMode",
    "DiscountUnit",
    "EstimatorPreset",
    "Gate",
    "Importance",
    "KLKind",
    "LengthNorm",
    "ObjectiveSettings",
    "estimator_length_norm",
    "advantage_estimator_names",
    "agg_loss",
    "check_loss_pairing",
    "entropy_from_logits",
    "get_advantage_estimator",
    "group_advantages",
    "group_index",
    "group_stats",
    "grpo_objective",
    "kl_penalty",
    "length_normalizer",
    "llds_loss",
    "logprobs_from_logits",
    "masked_mean",
    "policy_loss",
    "preserve_set",
    "preserve_token_count",
    "register_advantage_estimator",
    "restrict_logits",
    "segment_ids",
    "segment_sum",
    "token_advantages",
    "turn_credit_tokens",
    "turn_discount_weights",
    "unpack_allowed",
    "updates_per_rollout",
]
