"""One objective in three trainers: the native one, the TRL subclass and veRL's registered
policy loss (through veRL's own ``ppo_loss``, which adds its KL term) get the same batch —
several turns per row, rows with A < 0 and A ≥ 0, unequal lengths — and give the same
total loss, KL and LLDS terms and the same gradient, for every policy-gradient aggregation."""

from __future__ import annotations

import pytest
import torch

from agentgrpo.algos import AGG_MODES, ObjectiveSettings, grpo_objective, preserve_token_count

B, T = 6, 14
CLIP_LOW, CLIP_HIGH = 0.2, 0.28
KL_COEF, LLDS_COEF = 0.05, 0.3


def _batch():
    g = torch.Generator().manual_seed(0)
    mask = torch.zeros(B, T, dtype=torch.int64)
    for row, length in enumerate((14, 9, 12, 5, 11, 7)):
        mask[row, :length] = 1
        mask[row, 2 + row % 3] = 0  # a tool observation: two assistant turns
    seq_adv = torch.tensor([1.2, -0.7, 0.0, -1.5, 0.4, 0.9])
    token_adv = seq_adv[:, None] * mask / mask.sum(-1, keepdim=True).sqrt()  # LATA's A/√L
    old = -3 * torch.rand(B, T, generator=g)
    ref = old + 0.1 * torch.randn(B, T, generator=g)
    logp = old + 0.3 * torch.randn(B, T, generator=g)
    return mask, seq_adv, token_adv, old, ref, logp


def _settings(agg: str) -> ObjectiveSettings:
    """The one objective all three trainers are given."""
    return ObjectiveSettings(adv_estimator="dr_grpo", clip_low=CLIP_LOW, clip_high=CLIP_HIGH, loss_agg=agg,
                             kl_coef=KL_COEF, kl_kind="k3", llds_coef=LLDS_COEF)


def _native(agg: str):
    """What ``GRPOTrainer._mini_batch_update`` computes for a one-micro-batch mini-batch."""
    mask, seq_adv, token_adv, old, ref, logp_values = _batch()
    logp = logp_values.clone().requires_grad_()
    loss, metrics = grpo_objective(
        logp, old, token_adv, mask, seq_adv=seq_adv, ref_logp=ref, **_settings(agg).loss_kwargs(),
        num_tokens=mask.sum(), num_seqs=B, num_preserve_tokens=preserve_token_count(seq_adv, mask))
    loss.backward()
    return loss.detach(), metrics, logp.grad


@pytest.mark.parametrize("agg", AGG_MODES)
def test_trl_loss_is_the_native_objective(agg, tiny_policy_dir, tmp_path):
    pytest.importorskip("trl")
    from datasets import Dataset

    from agentgrpo.integrations.trl import AgentGRPOConfig, AgentGRPOTrainer
    from agentgrpo.policy.hf import load_policy

    model, tokenizer = load_policy(tiny_policy_dir)
    args = AgentGRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=B, num_generations=B, steps_per_generation=1,
        num_iterations=2,  # two updates per generation batch: LLDS acts
        gradient_accumulation_steps=1, max_completion_length=T, objective=_settings(agg),
        report_to="none", use_cpu=True, save_strategy="no", disable_tqdm=True)
    trainer = AgentGRPOTrainer(model=model, processing_class=tokenizer, args=args,
                               reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                               train_dataset=Dataset.from_dict({"prompt": ["hello"] * B}))
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop; one window here
    mask, seq_adv, token_adv, old, ref, logp_values = _batch()
    inputs = {"completion_mask": mask, "advantages": token_adv, "old_per_token_logps": old,
              "ref_per_token_logps": ref, "num_items_in_batch": mask.sum().float(),
              "num_preserve_tokens": preserve_token_count(seq_adv, mask)}
    logp = logp_values.clone().requires_grad_()
    loss, metrics = trainer.objective(logp, inputs)
    loss.backward()
    native_loss, native_metrics, native_grad = _native(agg)
    assert torch.allclose(loss.detach(), native_loss, rtol=1e-6, atol=1e-7)
    for name in ("loss/kl", "loss/llds", "loss/pg"):
        assert metrics[name] == pytest.approx(native_metrics[name], rel=1e-6, abs=1e-9), name
    assert native_metrics["loss/llds"] > 0 and native_metrics["loss/kl"] > 0
    assert torch.allclose(logp.grad, native_grad, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("agg", AGG_MODES)
def test_verl_ppo_loss_is_the_native_objective(agg, monkeypatch):
    """veRL 0.9's engine path: ``verl.workers.utils.losses.ppo_loss`` calls our registered loss
    for L_pg + λ·L_LLDS and adds β·KL itself with ``loss_agg_mode=token-mean``."""
    pytest.importorskip("verl")
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.workers.config import FSDPActorConfig, PolicyLossConfig
    from verl.workers.utils.losses import ppo_loss

    import agentgrpo.integrations.verl  # noqa: F401  (registers agentgrpo_llds)
    from agentgrpo.integrations.verl.settings import OBJECTIVE_ENV, objective_json

    monkeypatch.setenv(OBJECTIVE_ENV, objective_json(_settings(agg)))  # as the launch scripts export it
    config = FSDPActorConfig(
        strategy="fsdp", rollout_n=B, ppo_micro_batch_size_per_gpu=B, clip_ratio_low=CLIP_LOW,
        clip_ratio_high=CLIP_HIGH, use_kl_loss=True, kl_loss_coef=KL_COEF, kl_loss_type="low_var_kl",
        loss_agg_mode="token-mean", policy_loss=PolicyLossConfig(loss_mode="agentgrpo_llds"))
    mask, seq_adv, token_adv, old, ref, logp_values = _batch()
    logp = logp_values.clone().requires_grad_()
    # veRL's model output is flat over [prompt (1 token) + response (T tokens)] per row, shifted by one
    flat = torch.cat([logp, torch.zeros(B, 1)], dim=1).reshape(-1)
    data = TensorDict({
        "prompts": torch.ones(B, 1, dtype=torch.long), "responses": torch.ones(B, T, dtype=torch.long),
        "attention_mask": torch.ones(B, 1 + T, dtype=torch.long), "response_mask": mask,
        "old_log_probs": old, "advantages": token_adv, "ref_log_prob": ref,
    }, batch_size=[B])
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=B)  # as veRL's engine
    loss, metrics = ppo_loss(config, {"log_probs": flat}, data)
    loss.backward()
    native_loss, native_metrics, native_grad = _native(agg)
    value = {name: float(getattr(metric, "values", [metric])[0]) for name, metric in metrics.items()}
    assert torch.allclose(loss.detach(), native_loss, rtol=1e-6, atol=1e-7)
    assert value["kl_loss"] == pytest.approx(native_metrics["loss/kl"], rel=1e-6)
    assert value["loss/llds"] == pytest.approx(native_metrics["loss/llds"], rel=1e-6)
    assert torch.allclose(logp.grad, native_grad, rtol=1e-6, atol=1e-8)
