"""The ``agentgrpo_llds`` policy loss for veRL: PPO-clip + λ·LLDS, both from ``agentgrpo.algos``.

Selected with ``actor_rollout_ref.actor.policy_loss.loss_mode=agentgrpo_llds``. veRL calls
it as ``fn(old_log_prob=, log_prob=, advantages=, response_mask=, loss_agg_mode=,
config=<actor config>, rollout_is_weights=)`` and expects ``(loss, metrics)``.

    loss = policy_loss(logp, old_logp, Â, mask)           (PPO-clip, decoupled ε_low/ε_high)
         + λ · llds_loss(logp, old_logp, Â, mask, gate)  (LLD paper, arXiv:2512.04220)

Both terms are reduced with veRL's ``loss_agg_mode`` and the same denominators. LLDS
needs the log-probs of the policy that sampled the batch to differ from the current
ones, so run several mini-batches per rollout (``ppo_mini_batch_size`` < batch) and/or
``ppo_epochs`` > 1: on a rollout's first mini-batch it is exactly 0.

Settings (the actor config rejects unknown keys and never sees ``algorithm``, so these
come from environment variables, forwarded to the Ray workers by the launch scripts):
``AGENTGRPO_LLDS_COEF`` (λ, default 0.2; 0 gives plain PPO-clip), ``AGENTGRPO_LLDS_GATE``
(``action`` | ``token`` | ``response``), ``AGENTGRPO_IMPORTANCE`` (``token`` | ``sequence``,
GSPO's ratio). Clip ranges are veRL's ``clip_ratio_low`` / ``clip_ratio_high``
(falling back to ``clip_ratio``). Unlike veRL's ``vanilla`` loss there is no dual-clip
(``clip_ratio_c``) bound on negative advantages, matching DESIGN §3.5.
"""

from __future__ import annotations

from typing import Any

import torch

from agentgrpo.algos import GATES, llds_loss, policy_loss
from agentgrpo.integrations.verl.settings import choice, config_value, setting

DEFAULT_LLDS_COEF = 0.2
IMPORTANCE_LEVELS = ("token", "sequence")


def clip_range(config: Any) -> tuple[float, float]:
    """``(ε_low, ε_high)`` from the actor config (``clip_ratio_low/high``, else ``clip_ratio``)."""
    base = config_value(config, "clip_ratio")
    base = 0.2 if base is None else float(base)
    low, high = config_value(config, "clip_ratio_low"), config_value(config, "clip_ratio_high")
    return (base if low is None else float(low)), (base if high is None else float(high))


def algos_denominators(
    global_batch_info: dict | None, response_mask: torch.Tensor
) -> dict[str, Any]:
    """veRL's ``global_batch_info`` as ``agentgrpo.algos.agg_loss`` denominators.

    veRL's ``agg_loss`` divides a micro-batch's sum by the *global* mini-batch count
    (``batch_num_tokens`` tokens, ``global_batch_size`` sequences) and multiplies by
    ``dp_size``, because FSDP averages gradients over the data-parallel ranks. Ours divides
    by the count it is given, so it gets the per-rank share ``count / dp_size``: the same
    quantity. Without global info veRL counts the micro-batch itself, and only rows with
    at least one active token as sequences; we pass exactly those counts (our own
    default for sequences would be all rows). ``loss_scale_factor`` is the
    ``seq-mean-token-sum-norm`` horizon (None: the response length, as in both).
    """
    info = dict(global_batch_info or {})
    dp_size = info.get("dp_size") or 1
    tokens, seqs = info.get("batch_num_tokens"), info.get("global_batch_size")
    active = response_mask.detach().bool()
    return {
        "num_tokens": active.sum() if tokens is None else tokens / dp_size,
        "num_seqs": active.any(dim=-1).sum() if seqs is None else seqs / dp_size,
        "horizon": info.get("loss_scale_factor"),
    }


def token_sum_scale(global_batch_info: dict | None, loss_agg_mode: str) -> float:
    """veRL's ``token-sum`` is the micro-batch sum times ``dp_size`` (gradients are averaged
    over ranks, this makes them a sum); algos' ``token-sum`` has no count to divide."""
    if loss_agg_mode != "token-sum":
        return 1.0
    return float(dict(global_batch_info or {}).get("dp_size") or 1)


def _prefixed(metrics: dict[str, float]) -> dict[str, float]:
    return {f"actor/{name}": float(value) for name, value in metrics.items()}


def agentgrpo_llds(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clip + λ·LLDS on veRL's tensors (all ``[bs, response_length]``).

    Returns ``(loss, metrics)``; metrics carry veRL's names for the PPO part
    (``actor/pg_clipfrac``, ``actor/ppo_kl``, ``actor/pg_clipfrac_lower``) and
    ``actor/llds/*``, ``actor/lld/action_rate``, ``actor/pg_term``, ``actor/llds_term``.
    """
    # veRL's actor config never holds these keys (it rejects unknown ones), so in practice
    # they come from the environment; a plain dict config (tests, other hosts) may set them.
    coef = setting(config, "llds_coef", DEFAULT_LLDS_COEF, float)
    gate = setting(config, "llds_gate", "action", choice(GATES))
    importance = setting(config, "importance", "token", choice(IMPORTANCE_LEVELS))
    clip_low, clip_high = clip_range(config)
    info = config_value(config, "global_batch_info")
    denominators = algos_denominators(info, response_mask)
    pg, pg_metrics = policy_loss(
        log_prob,
        old_log_prob,
        advantages,
        response_mask,
        clip_low=clip_low,
        clip_high=clip_high,
        agg=loss_agg_mode,
        importance=importance,
        rollout_is_weights=rollout_is_weights,
        **denominators,
    )
    llds, llds_metrics = llds_loss(
        log_prob, old_log_prob, advantages, response_mask, gate, agg=loss_agg_mode, **denominators
    )
    scale = token_sum_scale(info, loss_agg_mode)
    loss = (pg + coef * llds) * scale
    metrics = _prefixed({**pg_metrics, **llds_metrics})
    metrics["actor/pg_term"] = float(pg.detach()) * scale
    metrics["actor/llds_term"] = float(llds.detach()) * scale * coef
    return loss, metrics
