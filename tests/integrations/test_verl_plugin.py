"""The veRL plugin: loading it the way a Ray worker does, and the registered estimators
and policy loss fetched through veRL's own lookup, compared with ``agentgrpo.algos``."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import export_objective

pytest.importorskip("verl")
pytestmark = pytest.mark.verl

from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.workers.config import FSDPActorConfig  # noqa: E402

import agentgrpo.integrations.verl as plugin  # noqa: E402
from agentgrpo.algos import (  # noqa: E402
    PRESETS,
    get_advantage_estimator,
    group_advantages,  # noqa: E402
    llds_loss,
    policy_loss,
    preserve_token_count,
    token_advantages,
)

# every built-in registry estimator, under its veRL name
ESTIMATOR_TO_ALGOS = {f"agentgrpo_{name}": name for name in PRESETS}
AGG_MODES = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
    "token-sum",
)
OUR_NAMES = sorted(ESTIMATOR_TO_ALGOS) + ["agentgrpo_llds"]

WORKER_CHECK = (
    "import sys, verl\n"
    "from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn\n"
    f"names = {OUR_NAMES!r}\n"
    "fns = [get_adv_estimator_fn(n) for n in names[:-1]] + [get_policy_loss_fn(names[-1])]\n"
    "assert 'agentgrpo.integrations.verl' in sys.modules\n"
    "print(' '.join(f.__module__ for f in fns))\n"
)


@pytest.fixture(autouse=True)
def _no_agentgrpo_env(monkeypatch):
    for key in list(os.environ):
        if key.startswith("AGENTGRPO_"):
            monkeypatch.delenv(key)


def _worker(env_updates: dict[str, str]) -> subprocess.Popen:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("VERL_USE_EXTERNAL", "AGENTGRPO_"))
    }
    env.update(env_updates)
    return subprocess.Popen(
        [sys.executable, "-c", WORKER_CHECK],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_plugin_loads_in_a_fresh_worker_both_ways():
    """A Ray worker only runs `import verl`: the entry point (veRL >= 0.9) or
    VERL_USE_EXTERNAL_MODULES (0.6-0.8, entry points switched off here) must register us."""
    by_entry_point = _worker({})
    by_env_var = _worker(
        {
            "VERL_USE_EXTERNAL_PLUGINS": "none",
            "VERL_USE_EXTERNAL_MODULES": "agentgrpo.integrations.verl",
        }
    )
    for proc in (by_entry_point, by_env_var):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
        modules = out.split()
        assert len(modules) == len(OUR_NAMES) and all(
            m.startswith("agentgrpo.integrations.verl") for m in modules
        )


def test_registration_is_idempotent_and_refuses_conflicts():
    plugin.register()  # picks up estimators registered since the import (another test's, say)
    assert plugin.register() == []
    importlib.reload(plugin)  # a second import of the module: still no error, nothing new
    assert plugin.register() == []
    saved = core_algos.POLICY_LOSS_REGISTRY["agentgrpo_llds"]
    core_algos.POLICY_LOSS_REGISTRY["agentgrpo_llds"] = lambda **kw: None  # another plugin's loss
    try:
        with pytest.raises(ValueError, match="already registered"):
            plugin.register()
    finally:
        core_algos.POLICY_LOSS_REGISTRY["agentgrpo_llds"] = saved
    with pytest.raises(ValueError):  # veRL's own check for estimators
        core_algos.register_adv_est("agentgrpo_lata")(lambda **kw: None)


def _multi_turn_batch(seed: int, batch: int = 8, length: int = 24, group_size: int = 4):
    """Rewards on the last response token, masks with several assistant turns, uid groups."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(batch, length, dtype=torch.int64)
    for row in range(batch):
        end = int(torch.randint(6, length + 1, (1,), generator=g))
        mask[row, :end] = 1
        gaps = torch.randint(1, max(end - 1, 2), (2,), generator=g)
        mask[row, gaps] = 0  # tool observations inside the response
    scores = (torch.rand(batch, generator=g) > 0.5).float() + 0.3 * torch.rand(batch, generator=g)
    rewards = torch.zeros(batch, length)
    last = (mask.cumsum(-1) == mask.sum(-1, keepdim=True)) & mask.bool()
    rewards[last] = scores
    index = np.array([f"uid-{row // group_size}" for row in range(batch)], dtype=object)
    return rewards, mask, index, scores


@pytest.mark.parametrize("name", sorted(ESTIMATOR_TO_ALGOS))
@pytest.mark.parametrize("norm_by_std", [True, False])
def test_estimators_equal_algos_through_verl_lookup(name, norm_by_std, monkeypatch):
    rewards, mask, index, scores = _multi_turn_batch(seed=len(name) + norm_by_std)
    export_objective(monkeypatch, adv_estimator=ESTIMATOR_TO_ALGOS[name], norm_by_std=norm_by_std)
    config = OmegaConf.create({"adv_estimator": name})
    fn = core_algos.get_adv_estimator_fn(name)
    advantages, returns = fn(
        token_level_rewards=rewards, response_mask=mask, config=config, index=index
    )
    expected = get_advantage_estimator(ESTIMATOR_TO_ALGOS[name])(
        scores, list(index), mask, norm_by_std=norm_by_std
    ).token
    assert torch.equal(advantages, expected) and torch.equal(returns, expected)
    assert advantages.shape == rewards.shape and not advantages[mask == 0].any()


def test_lata_by_hand():
    """One group of two: scores 1 and 0, mean 0.5, std 0.5 → A = ±0.5/(0.5 + 1e-6);
    lengths 4 and 1 → ×1/2 and ×1."""
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]])
    adv, _ = core_algos.get_adv_estimator_fn("agentgrpo_lata")(
        token_level_rewards=rewards,
        response_mask=mask,
        config=None,
        index=np.array(["a", "a"], dtype=object),
    )
    a = 0.5 / (0.5 + 1e-6)
    expected = torch.tensor([[a / 2] * 4, [-a, 0.0, 0.0, 0.0]])
    assert torch.allclose(adv, expected, rtol=1e-6)


def test_estimator_settings_come_from_the_exported_objective(monkeypatch):
    rewards, mask, index, scores = _multi_turn_batch(seed=7)
    fn = core_algos.get_adv_estimator_fn("agentgrpo_turn_discount")
    adv = group_advantages(scores, list(index))
    export_objective(monkeypatch, adv_estimator="turn_discount", turn_discount_alpha=1.2, turn_discount_unit="turn")
    by_objective = fn(token_level_rewards=rewards, response_mask=mask, index=index, config=OmegaConf.create({}))[0]
    assert torch.equal(by_objective, token_advantages(adv, mask, "linear", 1.2, turn_discount_unit="turn"))
    monkeypatch.setenv("AGENTGRPO_OBJECTIVE", '{"turn_discount_alpha": 0.9, "alpha": 1}')
    with pytest.raises(ValueError, match="AGENTGRPO_OBJECTIVE must be a JSON object of .*'alpha'"):
        fn(token_level_rewards=rewards, response_mask=mask, index=index, config=None)
    monkeypatch.setenv("AGENTGRPO_OBJECTIVE", '{"turn_discount_alpha": 0.9}')  # unset fields: the defaults
    by_default = fn(token_level_rewards=rewards, response_mask=mask, index=index, config=None)[0]
    assert torch.equal(by_default, token_advantages(adv, mask, "linear", 0.9))
    with pytest.raises(ValueError, match="group ids"):
        fn(token_level_rewards=rewards, response_mask=mask, config=None)


def _actor_config(**global_info) -> FSDPActorConfig:
    config = FSDPActorConfig(
        strategy="fsdp",
        rollout_n=4,
        ppo_micro_batch_size_per_gpu=2,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
    )
    config.global_batch_info.update(global_info)
    return config


def _loss_batch(seed: int, batch: int = 6, length: int = 20):
    _, mask, _, _ = _multi_turn_batch(seed, batch, length, group_size=3)
    g = torch.Generator().manual_seed(seed + 100)
    old = -3 * torch.rand(batch, length, generator=g)
    logp = (old + 0.3 * torch.randn(batch, length, generator=g)).requires_grad_()
    adv = torch.randn(batch, length, generator=g) * mask
    return old, logp, adv, mask


def _call_ours(agg: str, old, logp, adv, mask, global_info, loss_agg_mode="token-mean", llds_coef=0.0,
               llds_gate="action"):
    with pytest.MonkeyPatch.context() as patch:  # the objective as the launch exports it
        export_objective(patch, loss_agg=agg, clip_low=0.2, clip_high=0.28, llds_coef=llds_coef, llds_gate=llds_gate)
        return _lookup_ours(old, logp, adv, mask, global_info, loss_agg_mode)


def _lookup_ours(old, logp, adv, mask, global_info, loss_agg_mode):
    return core_algos.get_policy_loss_fn("agentgrpo_llds")(
        old_log_prob=old,
        log_prob=logp,
        advantages=adv,
        response_mask=mask.bool(),
        loss_agg_mode=loss_agg_mode,
        config=_actor_config(**global_info),
        rollout_is_weights=None,
    )


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize(
    "global_info",
    [{}, {"dp_size": 2, "batch_num_tokens": 150, "global_batch_size": 11, "loss_scale_factor": 64}],
)
def test_llds_loss_equals_algos_through_verl_lookup(agg, global_info):
    old, logp, adv, mask = _loss_batch(seed=len(agg))
    loss, metrics = _call_ours(agg, old, logp, adv, mask, global_info, llds_coef=0.3, llds_gate="token")
    dp = global_info.get("dp_size", 1)
    local_tokens = mask.sum()
    tokens = global_info["batch_num_tokens"] / dp if global_info else local_tokens
    den = {
        "num_tokens": tokens,
        "num_seqs": global_info["global_batch_size"] / dp if global_info else (mask.sum(-1) > 0).sum(),
        "horizon": global_info.get("loss_scale_factor"),
    }
    pg, _ = policy_loss(logp, old, adv, mask, 0.2, 0.28, agg=agg, **den)
    if agg == "token-sum":  # veRL: the local sum times dp_size
        pg = dp * pg
    # LLDS: a token mean over the preserve set, its count scaled to the mini-batch's share
    preserve = preserve_token_count(adv, mask) * (tokens / local_tokens)
    llds, _ = llds_loss(logp, old, adv, mask, "token", agg="token-mean", num_tokens=preserve)
    assert torch.allclose(loss, pg + 0.3 * llds, rtol=1e-6, atol=1e-7)
    assert metrics["loss/llds"] == pytest.approx(float(llds.detach()), rel=1e-6)
    assert "algo/pg_clipfrac" in metrics and "algo/lld_action_rate" in metrics
    loss.backward()
    assert logp.grad is not None and not logp.grad[~mask.bool()].any()


def test_a_host_aggregation_other_than_token_mean_is_refused():
    old, logp, adv, mask = _loss_batch(seed=2)
    with pytest.raises(ValueError, match="loss_agg_mode='seq-mean-token-sum'.*algo.loss_agg.*AGENTGRPO_OBJECTIVE"):
        _call_ours("seq-mean-token-sum", old, logp, adv, mask, {}, loss_agg_mode="seq-mean-token-sum")


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize(
    "global_info",
    [{}, {"dp_size": 4, "batch_num_tokens": 333, "global_batch_size": 23, "loss_scale_factor": 50}],
)
def test_without_llds_it_is_verls_own_ppo_loss(agg, global_info):
    """λ = 0 and ratios far from the dual-clip bound: veRL's `vanilla` loss with the same
    aggregation, clip range and global-batch normalisation, to float precision."""
    old, logp, adv, mask = _loss_batch(seed=3 + len(agg))
    ours, _ = _call_ours(agg, old, logp.detach(), adv, mask, global_info)
    verls, _ = core_algos.get_policy_loss_fn("vanilla")(
        old_log_prob=old,
        log_prob=logp.detach(),
        advantages=adv,
        response_mask=mask.bool(),
        loss_agg_mode=agg,
        rollout_is_weights=None,
        config=_actor_config(**global_info),
    )
    assert torch.allclose(ours, verls, rtol=1e-6, atol=1e-7)


def test_micro_batches_with_global_info_sum_to_the_mini_batch_loss():
    # λ = 0 (_call_ours' default): without carried counts the LLDS preserve count is a ratio estimate
    old, logp, adv, mask = _loss_batch(seed=11, batch=8)
    info = {"dp_size": 1, "batch_num_tokens": int(mask.sum()), "global_batch_size": 8}
    whole, _ = _call_ours("seq-mean-token-sum", old, logp, adv, mask, info)
    parts = sum(
        _call_ours("seq-mean-token-sum", old[s], logp[s], adv[s], mask[s], info)[0]
        for s in (slice(0, 3), slice(3, 8))
    )
    assert torch.allclose(whole, parts, rtol=1e-6)


def test_llds_term_vanishes_on_policy_and_lambda_scales_it():
    old, logp, adv, mask = _loss_batch(seed=5)
    _, on_policy = _call_ours("seq-mean-token-sum", old, old.clone(), adv, mask, {}, llds_coef=0.5)
    assert on_policy["loss/llds"] == 0.0  # first mini-batch of a rollout
    losses = {}
    for coef in (0.0, 0.5):
        losses[coef], metrics = _call_ours("seq-mean-token-sum", old, logp, adv, mask, {}, llds_coef=coef)
    assert metrics["loss/llds"] > 0
    assert float((losses[0.5] - losses[0.0]).detach()) == pytest.approx(
        0.5 * metrics["loss/llds"], rel=1e-5
    )


def test_verl_holds_every_estimator_of_the_registry():
    from agentgrpo.algos import advantage_estimator_names

    plugin.register()
    ours = {name for name in core_algos.ADV_ESTIMATOR_REGISTRY if name.startswith("agentgrpo_")}
    assert {f"agentgrpo_{name}" for name in advantage_estimator_names()} <= ours
    assert "agentgrpo_dr_grpo" in ours  # the preset the old hand-written table lacked
