"""The ``agentgrpo_llds`` policy loss for veRL: ``agentgrpo.algos.grpo_objective`` on veRL's tensors.

Selected with ``actor_rollout_ref.actor.policy_loss.loss_mode=agentgrpo_llds`` (every
launch script in ``examples/verl/`` does; λ = 0 leaves the plain PPO-clip objective).
veRL calls it as ``fn(old_log_prob=, log_prob=, advantages=, response_mask=,
loss_agg_mode=, config=<actor config>, rollout_is_weights=)`` and expects ``(loss, metrics)``.

The objective is the same as the native trainer's and the TRL subclass's:

    L = L_pg (PPO-clip, reduced with ``loss_agg``) + β·KL + λ·L_LLDS

with KL and LLDS as token means (DESIGN §3.6–3.7). veRL adds ``β·KL`` (and its entropy
bonus) itself, reducing them with the actor's ``loss_agg_mode``; for β to mean what it
means in the other trainers that mode must be ``token-mean`` (veRL's default), and this
loss refuses any other. The policy-gradient term's aggregation is ours: the objective's
``loss_agg`` (the length factor is in the advantage).

Denominators come from veRL's ``global_batch_info`` (the whole mini-batch's token and
sequence counts, and ``dp_size``), so micro-batches and data-parallel ranks add up to
the mini-batch's loss. veRL does not count the LLDS preserve set (A ≥ 0) over the
mini-batch: the ``agentgrpo_*`` estimators count it where the advantages are computed
and carry it in the advantages, outside the response mask (``estimators``), so λ·LLDS
is the native value for every micro-batch size, dp size and aggregation. A micro-batch
whose rows have no position outside the mask (every row a full-length single turn)
cannot carry it, and veRL's legacy workers (no ``global_batch_info``) scale each
micro-batch's loss themselves; then each micro-batch scales its own preserve count by
the mini-batch's token count over its own (a ratio estimate) and logs
``algo/llds_count_estimated`` = 1.

Settings: the objective, read whole from ``AGENTGRPO_OBJECTIVE`` (``settings.read_objective``;
the launch scripts export it from ``agentgrpo hosts verl`` and forward it to the Ray
workers, as the actor config rejects unknown keys): clip ranges, ``loss_agg``, ratio level,
λ and gate (``loss_settings``). Its β and entropy coefficient are veRL's to apply
(``actor.kl_loss_coef``, ``actor.entropy_coeff``, written from the same objective and
checked against it at launch), so this loss passes 0 for both. Unlike veRL's ``vanilla``
loss there is no dual-clip (``clip_ratio_c``) bound, matching DESIGN §3.5.
"""

from __future__ import annotations

from typing import Any

import torch

from agentgrpo.algos import grpo_objective, preserve_token_count
from agentgrpo.integrations.verl.estimators import carried_preserve_count
from agentgrpo.integrations.verl.settings import config_value, read_objective

HOST_LOSS_AGG = "token-mean"


def loss_settings() -> dict[str, Any]:
    """``grpo_objective``'s settings as ``agentgrpo_llds`` applies them: the exported objective's,
    with β and the entropy coefficient 0 (veRL adds those terms itself; module docstring)."""
    return {**read_objective().loss_kwargs(), "kl_coef": 0.0, "entropy_coef": 0.0}


def objective_counts(
    global_batch_info: dict | None, response_mask: torch.Tensor, token_adv: torch.Tensor, loss_agg: str
) -> dict[str, Any]:
    """veRL's ``global_batch_info`` as ``grpo_objective`` denominators (and the aggregation).

    veRL's ``agg_loss`` divides a micro-batch's sum by the *global* mini-batch count
    (``batch_num_tokens`` tokens, ``global_batch_size`` sequences) and multiplies by
    ``dp_size``, because FSDP averages gradients over the data-parallel ranks. Ours divides
    by the count it is given, so it gets the per-rank share ``count / dp_size``: the same
    quantity. Without global info veRL counts the micro-batch itself, and only rows with
    at least one active token as sequences; we pass exactly those counts.
    ``loss_scale_factor`` is the ``seq-mean-token-sum-norm`` horizon (None: the response
    length, as in both). ``token-sum`` (veRL: the sum times ``dp_size``) has no count to
    divide; it is the same quantity as ``seq-mean-token-sum`` over ``1 / dp_size`` sequences.
    """
    info = dict(global_batch_info or {})
    dp_size = info.get("dp_size") or 1
    tokens, seqs = info.get("batch_num_tokens"), info.get("global_batch_size")
    active = response_mask.detach().bool()
    local_tokens = active.sum()
    num_tokens = local_tokens if tokens is None else tokens / dp_size
    carried = carried_preserve_count(token_adv, response_mask) if tokens is not None else None
    if carried is not None:  # the whole mini-batch's count, each rank's share as for the tokens
        preserve = carried / dp_size
    else:
        preserve = preserve_token_count(token_adv, response_mask)
        if tokens is not None:
            preserve = preserve * (num_tokens / local_tokens.clamp_min(1))
    counts = {
        "loss_agg": loss_agg,
        "num_tokens": num_tokens,
        "num_seqs": active.any(dim=-1).sum() if seqs is None else seqs / dp_size,
        "horizon": info.get("loss_scale_factor"),
        "num_preserve_tokens": preserve,
        "estimated": carried is None,
    }
    if loss_agg == "token-sum":
        counts.update(loss_agg="seq-mean-token-sum", num_seqs=1.0 / dp_size)
    return counts


def agentgrpo_llds(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = HOST_LOSS_AGG,
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """``L_pg + λ·L_LLDS`` of ``grpo_objective`` on veRL's tensors (all ``[bs, response_length]``).

    Returns ``(loss, metrics)`` with the objective's metric names (``loss/pg``,
    ``loss/llds``, ``algo/pg_clipfrac``, ``algo/lld_action_rate``, …); veRL logs its own
    KL and entropy terms.
    """
    if loss_agg_mode != HOST_LOSS_AGG:
        raise ValueError(
            f"actor_rollout_ref.actor.loss_agg_mode={loss_agg_mode!r}: with loss_mode=agentgrpo_llds it "
            f"must be {HOST_LOSS_AGG!r} (veRL reduces its KL and entropy terms with it, and agentgrpo "
            "defines them as token means); set the policy-gradient aggregation with algo.loss_agg "
            "(the objective's loss_agg in AGENTGRPO_OBJECTIVE)"
        )
    settings = loss_settings()
    counts = objective_counts(config_value(config, "global_batch_info"), response_mask, advantages,
                              settings.pop("loss_agg"))
    estimated = counts.pop("estimated")
    advantages = advantages * response_mask.detach().to(advantages.dtype)  # drop the carried count
    loss, metrics = grpo_objective(
        log_prob,
        old_log_prob,
        advantages,
        response_mask,
        rollout_is_weights=rollout_is_weights,
        **settings,
        **counts,
    )
    metrics["algo/llds_count_estimated"] = float(estimated)
    return loss, metrics
