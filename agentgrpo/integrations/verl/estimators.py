"""veRL advantage estimators: every ``agentgrpo.algos`` registry estimator, as ``agentgrpo_<name>``.

``algorithm.adv_estimator=agentgrpo_lata`` selects the registry's ``lata`` (A/√L), and so
on for every registered name (``grpo``, ``lata``, ``turn_discount``,
``turn_discount_lata``, ``dr_grpo``, and custom estimators registered before the
plugin is imported). The registry is the only variant table: nothing here fixes a
length factor or a discount.

Each is called by veRL as ``fn(token_level_rewards, response_mask, config, index)`` and
returns per-token advantages ``(advantages, returns)``, both ``[bs, response_length]``
(veRL allows per-token values).

Settings: the estimator's knobs (``norm_by_std``, ``adv_std_eps``, Turn-Discount's α and
unit) are the objective's, read whole from ``AGENTGRPO_OBJECTIVE`` (``settings.read_objective``;
``agentgrpo hosts verl`` writes it, the launch check refuses an ``algorithm.adv_estimator``
other than ``agentgrpo_<its estimator>``). The mini-batch layout is veRL's, from
``algorithm.<key>`` (or ``AGENTGRPO_<KEY>``): ``llds_mini_batch_size`` (prompts per PPO
mini-batch, ``actor.ppo_mini_batch_size``), ``llds_rollout_n`` (``rollout.n``) and
``llds_dp_size`` (the actor's data-parallel ranks): when all three are set, every row also
carries the LLDS preserve-set token count of its whole PPO mini-batch (below).

Carrying the LLDS count. veRL hands the policy loss one micro-batch of one rank, but
LLDS divides by the preserve-set tokens of the whole mini-batch (DESIGN §3.7, as the
native trainer does). The batch reaches the actor in the order it has here (veRL
balances it before computing advantages), is cut into ``llds_dp_size`` contiguous rank
shares, and each share into mini-batches of ``llds_mini_batch_size · llds_rollout_n /
llds_dp_size`` rows in order (``actor.shuffle=false``; the launch check refuses the
rest). So each row's mini-batch is known here: its count ``N`` is written as ``−(N + 1)``
on the row's positions outside ``response_mask`` (padding, tool tokens), which no loss
term reads; ``agentgrpo_llds`` reads it back (``carried_preserve_count``) and zeroes
those positions.

Semantics at the boundary: the outcome score sits on the last response token of
``token_level_rewards``; we take the row sum, as veRL's ``grpo`` does (equal to that
score, plus the per-token KL penalty when ``use_kl_in_reward`` is on). Group ids are
``index`` (veRL's per-prompt ``uid``). Unlike veRL's ``grpo``, a group of size 1 gets
advantage 0 (DESIGN §3.1). The length factor lives in the advantage, so the policy
loss ``agentgrpo_llds`` reduces the policy-gradient term with the objective's ``loss_agg``
(by default one that does not divide by the length again). Per-turn PRM credit needs
per-turn scores veRL does not pass to estimators, so it is not offered here; the PRM-Lite
score reaches veRL through the reward (``reward.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from agentgrpo.algos import advantage_estimator_names, get_advantage_estimator
from agentgrpo.algos.llds import preserve_set
from agentgrpo.integrations.verl.settings import optional_int, read_objective, setting

VERL_PREFIX = "agentgrpo_"


def verl_name(name: str) -> str:
    """The veRL ``algorithm.adv_estimator`` name of registry estimator ``name``."""
    return VERL_PREFIX + name


def estimator_settings() -> dict[str, Any]:
    """The registry estimator's keyword arguments: the exported objective's (module docstring)."""
    return read_objective().estimator_kwargs()


def verl_token_advantages(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    index: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(advantages, returns)`` of registry estimator ``name``, both ``[bs, response_length]``.

    Args:
        token_level_rewards: ``[bs, T]``, the outcome on the last response token.
        response_mask: ``[bs, T]``, 1 on tokens the policy generated (multi-turn: one run
            of ones per assistant turn, which Turn-Discount by turn uses).
        config: veRL's ``algorithm`` config, for the mini-batch layout (or None: environment).
        index: ``[bs]`` group ids (numpy array of uids).
    """
    if index is None:
        raise ValueError(
            f"{verl_name(name)} needs the group ids: veRL passes them as `index` when the batch "
            "has a `uid` field (set actor_rollout_ref.rollout.n > 1)"
        )
    with torch.no_grad():
        advantages = get_advantage_estimator(name)(
            token_level_rewards.sum(dim=-1),  # [bs]
            index,
            response_mask,
            **estimator_settings(),
        )
        token_adv = advantages.token
        layout = [setting(config, key, None, optional_int)
                  for key in ("llds_mini_batch_size", "llds_rollout_n", "llds_dp_size")]
        if None not in layout:
            prompts, n, dp_size = layout
            token_adv = carry_preserve_counts(token_adv, response_mask, prompts * n, dp_size)
    return token_adv, token_adv


def mini_batch_of_rows(rows: int, mini_batch_rows: int, dp_size: int) -> torch.Tensor:
    """``[rows]``: the PPO mini-batch (0, 1, …) of each row of a rollout batch that veRL cuts
    into ``dp_size`` contiguous rank shares, each into mini-batches of
    ``mini_batch_rows / dp_size`` rows in order."""
    if rows % dp_size or mini_batch_rows % dp_size:
        raise ValueError(f"{rows} rows and {mini_batch_rows} rows per mini-batch must both divide "
                         f"among llds_dp_size={dp_size} ranks")
    per_rank, per_rank_mini = rows // dp_size, mini_batch_rows // dp_size
    return (torch.arange(rows) % per_rank) // per_rank_mini


def carry_preserve_counts(token_adv: torch.Tensor, response_mask: torch.Tensor, mini_batch_rows: int,
                          dp_size: int) -> torch.Tensor:
    """``token_adv`` with ``−(N + 1)`` outside ``response_mask``, N = the preserve-set response
    tokens of the row's PPO mini-batch (module docstring); unchanged on the mask."""
    active = response_mask.detach().bool()
    mini = mini_batch_of_rows(token_adv.shape[0], mini_batch_rows, dp_size).to(token_adv.device)
    per_row = (active & preserve_set(token_adv, response_mask).unsqueeze(-1)).sum(dim=-1)
    counts = torch.zeros(int(mini.max()) + 1, dtype=per_row.dtype, device=per_row.device).index_add(0, mini, per_row)
    carrier = -(counts[mini] + 1).to(token_adv.dtype).unsqueeze(-1).expand_as(token_adv)
    return torch.where(active, token_adv, carrier)


def carried_preserve_count(advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor | None:
    """The mini-batch preserve-set count a micro-batch's rows carry (``carry_preserve_counts``),
    or None when none of its rows has a position outside the mask (or nothing was carried)."""
    slots = advantages.detach().masked_fill(response_mask.detach().bool(), 0.0)
    carried = slots.amin()
    return None if carried > -1 else -carried - 1


def _verl_estimator(name: str) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    def estimator(token_level_rewards, response_mask, config=None, index=None, **kwargs):
        return verl_token_advantages(name, token_level_rewards, response_mask, config, index)

    estimator.__name__ = estimator.__qualname__ = verl_name(name)
    estimator.__doc__ = f"The agentgrpo registry estimator {name!r} for veRL (see the module docstring)."
    return estimator


def verl_estimators() -> dict[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]]:
    """``{veRL name: estimator}`` for every name in the agentgrpo registry, now."""
    return {verl_name(name): _verl_estimator(name) for name in advantage_estimator_names()}
