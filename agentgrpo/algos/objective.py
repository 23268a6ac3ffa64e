"""The GRPO objective: one function every trainer calls (DESIGN §3.5–3.7).

    L = L_pg + β·KL + λ·L_LLDS − c_H·H

* ``L_pg``: PPO-clip (:func:`policy_loss`) reduced with ``loss_agg`` — the only term
  whose aggregation is a choice (the length factor of the advantage pairs with it);
* ``KL``: the per-token estimate (:func:`kl_penalty`, ``kl_kind``) averaged over the
  response tokens: ``Σ_bt k[b,t]·m[b,t] / N``, N = ``num_tokens``;
* ``L_LLDS``: the LLDS penalty summed over the preserve set (A_b ≥ 0) and divided by
  its token count ``num_preserve_tokens`` (the LLD paper's ``/ N``, DESIGN §3.7);
* ``H``: mean entropy over the response tokens (``/ num_tokens``), a bonus when
  ``entropy_coef`` > 0.

So β and λ multiply token means whatever ``loss_agg`` the policy-gradient term uses.
The optional denominators are the counts of the whole optimizer batch: a host that
splits it into micro-batches passes the same counts to each micro-batch (scaled to its
data-parallel share), and the micro-batch losses add up to the batch's loss and
gradient. Without them each call counts its own rows.

Metrics (one vocabulary for every trainer; a host that needs its own prefix puts these
names under it): ``loss/total``, ``loss/pg``, ``loss/kl``, ``loss/llds``,
``loss/entropy``, and ``algo/`` ``pg_clipfrac``, ``pg_clipfrac_lower``,
``pg_clipfrac_upper``, ``ppo_kl``, ``ratio_mean``, ``ratio_max``,
``llds_gated_action_frac``, ``llds_penalized_token_frac``, ``llds_preserve_frac``,
``lld_action_rate``. The ``loss/*`` values are this call's terms (with global
denominators they add up over micro-batches); the ``algo/*`` values are shares within
this call's rows.
"""
from __future__ import annotations

import torch

from agentgrpo.algos.llds import Gate, llds_loss, preserve_set
from agentgrpo.algos.losses import AggMode, Importance, KLKind, Number, agg_loss, kl_penalty, policy_loss

OBJECTIVE_METRICS = (
    "loss/total", "loss/pg", "loss/kl", "loss/llds", "loss/entropy",
    "algo/pg_clipfrac", "algo/pg_clipfrac_lower", "algo/pg_clipfrac_upper", "algo/ppo_kl",
    "algo/ratio_mean", "algo/ratio_max", "algo/llds_gated_action_frac",
    "algo/llds_penalized_token_frac", "algo/llds_preserve_frac", "algo/lld_action_rate",
)

_LLDS_NAMES = {
    "llds/gated_action_frac": "algo/llds_gated_action_frac",
    "llds/penalized_token_frac": "algo/llds_penalized_token_frac",
    "llds/preserve_frac": "algo/llds_preserve_frac",
    "lld/action_rate": "algo/lld_action_rate",
}


def grpo_objective(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    token_adv: torch.Tensor,
    mask: torch.Tensor,
    *,
    seq_adv: torch.Tensor | None = None,
    ref_logp: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    clip_low: float,
    clip_high: float,
    loss_agg: AggMode | str,
    importance: Importance | str,
    kl_coef: float,
    kl_kind: KLKind | str,
    llds_coef: float,
    llds_gate: Gate | str,
    entropy_coef: float,
    num_tokens: Number | None = None,
    num_seqs: Number | None = None,
    horizon: Number | None = None,
    num_preserve_tokens: Number | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """``L_pg + β·KL + λ·L_LLDS − c_H·H`` on one (micro-)batch; see the module docstring.

    The settings (``clip_low`` … ``entropy_coef``) have no defaults here: their one set of
    defaults is :class:`~agentgrpo.algos.settings.ObjectiveSettings`, whose ``loss_kwargs()``
    every trainer passes.

    Args:
        logp: ``[B, T]`` log-probs under the current policy (gradients flow through it).
        old_logp: ``[B, T]`` behaviour-policy log-probs.
        token_adv: ``[B, T]`` token advantages (an estimator's ``Advantages.token``).
        mask: ``[B, T]`` response mask (1 on sampled tokens; its runs are the actions).
        seq_adv: ``[B]`` group advantages A_b, whose sign defines the LLDS preserve set;
            default: the sign of each row's summed token advantage.
        ref_logp: ``[B, T]`` reference log-probs; required when ``kl_coef`` > 0.
        entropy: ``[B, T]`` token entropies (with grad if the bonus should act); required
            when ``entropy_coef`` > 0, else only logged when given.
        clip_low, clip_high, loss_agg, importance, rollout_is_weights: of :func:`policy_loss`.
        kl_coef, kl_kind: β and the estimator of the KL term.
        llds_coef, llds_gate: λ and the gate of the LLDS term.
        entropy_coef: c_H of the entropy bonus.
        num_tokens, num_seqs, horizon: the batch's response tokens, sequences and horizon
            (:func:`agg_loss`); ``num_tokens`` also divides KL and H.
        num_preserve_tokens: the batch's response tokens in the preserve set (divides LLDS).

    Returns:
        ``(loss, metrics)``: a 0-d float32 tensor and the names of :data:`OBJECTIVE_METRICS`.
    """
    for name, coef in (("kl_coef", kl_coef), ("llds_coef", llds_coef), ("entropy_coef", entropy_coef)):
        if not coef >= 0:
            raise ValueError(f"{name} must be >= 0, got {coef}")
    if kl_coef > 0 and ref_logp is None:
        raise ValueError("kl_coef > 0 needs ref_logp")
    if entropy_coef > 0 and entropy is None:
        raise ValueError("entropy_coef > 0 needs entropy")
    pg, pg_metrics = policy_loss(
        logp, old_logp, token_adv, mask, clip_low, clip_high, loss_agg, importance,
        num_tokens=num_tokens, num_seqs=num_seqs, horizon=horizon, rollout_is_weights=rollout_is_weights)
    preserve_adv = token_adv if seq_adv is None else seq_adv  # llds_loss takes [B] or [B, T]
    llds, llds_metrics = llds_loss(logp, old_logp, preserve_adv, mask, llds_gate, agg="token-mean",
                                   num_tokens=num_preserve_tokens)
    loss = pg + llds_coef * llds
    mean_entropy = kl = pg.new_zeros(())
    if entropy is not None:
        mean_entropy = agg_loss(entropy, mask, "token-mean", num_tokens=num_tokens)
        loss = loss - entropy_coef * mean_entropy
    if ref_logp is not None:
        kl = agg_loss(kl_penalty(logp, ref_logp, kl_kind), mask, "token-mean", num_tokens=num_tokens)
        loss = loss + kl_coef * kl
    terms = torch.stack([loss, pg, kl, llds, mean_entropy]).detach().tolist()  # one host sync
    metrics = dict(zip(OBJECTIVE_METRICS[:5], terms))
    metrics.update({f"algo/{name}": float(value) for name, value in pg_metrics.items()})
    metrics.update({_LLDS_NAMES[name]: float(value) for name, value in llds_metrics.items()
                    if name in _LLDS_NAMES})
    return loss, metrics


def preserve_token_count(adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Response tokens of the trajectories with A_b ≥ 0 (the LLDS denominator), 0-d;
    ``adv`` is ``[B]`` or ``[B, T]`` as in :func:`llds_loss`."""
    return (mask.detach().bool() & preserve_set(adv, mask).unsqueeze(-1)).sum()
