"""λ·LLDS and its gradient are the same number in every host, however the mini-batch is cut.

One rollout batch of 16 rows (two PPO mini-batches of 8; several turns per row, rows with
A < 0 and A ≥ 0, unequal lengths). Truth: ``grpo_objective`` on each whole mini-batch with
its own counts (DESIGN §3.7). Then the native trainer's micro-batching, veRL's real
``ppo_loss`` fed the way veRL 0.9's FSDP engine feeds it (dp = 1 or 2 ranks simulated by
splitting the batch into contiguous rank shares, gradients summed over micro-batches and
averaged over ranks as DDP/FSDP does; the LLDS count carried by the agentgrpo estimator),
and the TRL subclass (accumulation windows of 1, 2, 4 micro-batches) must all give λ·LLDS
and its gradient within 1e-6 relative, for every aggregation; LLDS is exactly 0 on
unchanged weights in each.
"""

from __future__ import annotations

import pytest
import torch
from helpers import export_objective, objective

from agentgrpo.algos import AGG_MODES, preserve_token_count

ROWS, T, MINI = 16, 14, 8
LLDS_COEF = 0.2
MICRO_SIZES = (1, 2, 4)


def _batch(unchanged: bool = False):
    g = torch.Generator().manual_seed(1)
    mask = torch.zeros(ROWS, T, dtype=torch.int64)
    lengths = torch.randint(5, T + 1, (ROWS,), generator=g)
    for row in range(ROWS):
        mask[row, : int(lengths[row])] = 1
        mask[row, 2 + row % 3] = 0  # a tool observation: two assistant turns
    seq_adv = torch.randn(ROWS, generator=g, dtype=torch.float64)
    seq_adv[::5] = 0.0  # A = 0 is in the preserve set
    token_adv = seq_adv[:, None] * mask / mask.sum(-1, keepdim=True).sqrt()  # LATA's A/√L
    # float64: λ·LLDS is read as a difference of two losses, which float32 would blur at 1e-6
    old = -3 * torch.rand(ROWS, T, generator=g, dtype=torch.float64)
    noise = torch.randn(ROWS, T, generator=g, dtype=torch.float64)
    logp = old.clone() if unchanged else old + 0.3 * noise
    return mask, token_adv, old, logp


def _llds_part(run, llds_coef: float = LLDS_COEF):
    """(λ·LLDS, its gradient): the loss and gradient with λ minus those with λ = 0."""
    with_llds, grad_with = run(llds_coef)
    without, grad_without = run(0.0)
    return with_llds - without, grad_with - grad_without


def _native(rows: torch.Tensor, agg: str, micro: int | None, unchanged: bool = False):
    """The native trainer: the mini-batch's counts for every micro-batch; gradients summed."""
    mask, token_adv, old, logp_values = _batch(unchanged)
    m, adv, o = mask[rows], token_adv[rows], old[rows]
    counts = dict(num_tokens=m.sum(), num_seqs=len(rows), num_preserve_tokens=preserve_token_count(adv, m))

    def run(coef):
        logp = logp_values[rows].clone().requires_grad_()
        total = 0.0
        for part in torch.split(torch.arange(len(rows)), micro or len(rows)):
            loss, _ = objective(logp[part], o[part], adv[part], m[part], loss_agg=agg, llds_coef=coef, **counts)
            loss.backward()
            total += loss.detach()
        return total, logp.grad

    return _llds_part(run)


def _mini_batches(dp: int) -> list[torch.Tensor]:
    """The global rows of each PPO mini-batch when veRL cuts the batch into ``dp`` contiguous
    rank shares and each share into mini-batches in order."""
    per_rank, per_rank_mini = ROWS // dp, MINI // dp
    return [torch.cat([torch.arange(r * per_rank + i * per_rank_mini, r * per_rank + (i + 1) * per_rank_mini)
                       for r in range(dp)]) for i in range(ROWS // MINI)]


def _verl(dp: int, micro: int, agg: str, monkeypatch, unchanged: bool = False):
    """veRL 0.9's engine path per mini-batch: each rank's micro-batches through ``ppo_loss``."""
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.workers.config import FSDPActorConfig, PolicyLossConfig
    from verl.workers.utils.losses import ppo_loss

    import agentgrpo.integrations.verl  # noqa: F401  (registers agentgrpo_llds)
    from agentgrpo.integrations.verl.estimators import carry_preserve_counts

    mask, token_adv, old, logp_values = _batch(unchanged)
    carried = carry_preserve_counts(token_adv, mask, MINI, dp)  # what the estimator hands veRL
    results = []
    for rows in _mini_batches(dp):
        def run(coef, rows=rows):
            export_objective(monkeypatch, loss_agg=agg, llds_coef=coef)  # as the launch exports it
            config = FSDPActorConfig(
                strategy="fsdp", rollout_n=MINI, ppo_micro_batch_size_per_gpu=micro, use_kl_loss=False,
                loss_agg_mode="token-mean", policy_loss=PolicyLossConfig(loss_mode="agentgrpo_llds"))
            logp = logp_values[rows].clone().requires_grad_()
            total = 0.0
            for rank_rows in torch.arange(len(rows)).chunk(dp):
                for part in rank_rows.split(micro):
                    index = rows[part]
                    flat = torch.cat([logp[part], logp.new_zeros(len(part), 1)], dim=1).reshape(-1)
                    data = TensorDict({
                        "prompts": torch.ones(len(part), 1, dtype=torch.long),
                        "responses": torch.ones(len(part), T, dtype=torch.long),
                        "attention_mask": torch.ones(len(part), 1 + T, dtype=torch.long),
                        "response_mask": mask[index], "old_log_probs": old[index], "advantages": carried[index],
                    }, batch_size=[len(part)])
                    tu.assign_non_tensor(data, dp_size=dp, batch_num_tokens=int(mask[rows].sum()),
                                         global_batch_size=MINI)
                    loss, _ = ppo_loss(config, {"log_probs": flat}, data)
                    (loss / dp).backward()  # DDP/FSDP average the ranks' gradients
                    total += loss.detach() / dp
            return total, logp.grad

        results.append((rows, _llds_part(run)))
    return results


def _trl(trainer, micro: int, agg: str, unchanged: bool = False):
    """The TRL subclass: each optimizer step's micro-batches counted by ``count_windows``."""
    mask, token_adv, old, logp_values = _batch(unchanged)
    steps = MINI // micro
    trainer.args.gradient_accumulation_steps = steps
    trainer.current_gradient_accumulation_steps = steps
    parts = list(torch.arange(ROWS).split(micro))
    results = []
    for window in range(ROWS // MINI):
        window_parts = parts[window * steps:(window + 1) * steps]
        rows = torch.cat(window_parts)

        def run(coef, window_parts=window_parts, rows=rows):
            trainer.args.objective = {**trainer.args.objective, "loss_agg": agg, "llds_coef": coef}
            batches = [{"completion_mask": mask[p], "advantages": token_adv[p], "old_per_token_logps": old[p],
                        "num_items_in_batch": mask.sum().float()} for p in window_parts]
            trainer.count_windows(batches)
            logp = logp_values[rows].clone().requires_grad_()
            total, start = 0.0, 0
            for batch, part in zip(batches, window_parts):
                loss, _ = trainer.objective(logp[start:start + len(part)], batch)
                loss.backward()
                total += loss.detach()
                start += len(part)
            return total, logp.grad

        results.append((rows, _llds_part(run)))
    return results


def _assert_same(value, grad, truth_value, truth_grad, what):
    assert torch.allclose(value, truth_value, rtol=1e-6, atol=1e-9), (what, float(value), float(truth_value))
    scale = truth_grad.abs().max().clamp_min(1e-12)
    assert (grad - truth_grad).abs().max() <= 1e-6 * scale, what


@pytest.mark.parametrize("agg", AGG_MODES)
def test_native_micro_batches_give_the_mini_batch_llds(agg):
    for rows in _mini_batches(1) + _mini_batches(2):
        truth = _native(rows, agg, None)
        assert truth[0] > 0
        for micro in MICRO_SIZES:
            _assert_same(*_native(rows, agg, micro), *truth, f"native micro {micro}")
        value, grad = _native(rows, agg, 2, unchanged=True)
        assert value == 0 and torch.count_nonzero(grad) == 0


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("dp", [1, 2])
def test_verl_llds_is_the_native_value_for_every_micro_batch_and_dp_size(agg, dp, monkeypatch):
    pytest.importorskip("verl")
    for micro in MICRO_SIZES:
        for rows, (value, grad) in _verl(dp, micro, agg, monkeypatch):
            _assert_same(value, grad, *_native(rows, agg, None), f"veRL dp {dp} micro {micro}")
    for _rows, (value, grad) in _verl(dp, 1, agg, monkeypatch, unchanged=True):
        assert value == 0 and torch.count_nonzero(grad) == 0


def test_the_verl_estimator_carries_each_mini_batchs_count():
    from agentgrpo.integrations.verl.estimators import carried_preserve_count, verl_token_advantages

    mask, token_adv, _, _ = _batch()
    rewards = torch.zeros(ROWS, T)
    rewards[:, -1] = torch.arange(ROWS) % 3
    config = {"llds_mini_batch_size": 2, "llds_rollout_n": 4, "llds_dp_size": 2}
    adv, _ = verl_token_advantages("lata", rewards, mask, config, index=torch.arange(ROWS) // 4)
    plain, _ = verl_token_advantages("lata", rewards, mask, None, index=torch.arange(ROWS) // 4)
    assert torch.equal(adv * mask, plain) and carried_preserve_count(plain, mask) is None
    for rows in _mini_batches(2):
        count = preserve_token_count(plain[rows], mask[rows])
        for part in rows.split(2):
            assert carried_preserve_count(adv[part], mask[part]) == count


@pytest.mark.parametrize("agg", AGG_MODES)
def test_trl_llds_is_the_native_value_for_every_accumulation(agg, tiny_policy_dir, tmp_path):
    pytest.importorskip("trl")
    from datasets import Dataset

    from agentgrpo.integrations.trl import AgentGRPOConfig, AgentGRPOTrainer
    from agentgrpo.policy.hf import load_policy

    model, tokenizer = load_policy(tiny_policy_dir)
    args = AgentGRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=MINI, num_generations=MINI, steps_per_generation=2,
        gradient_accumulation_steps=1, max_completion_length=T,
        objective={"kl_coef": 0.0, "llds_coef": LLDS_COEF, "adv_estimator": "dr_grpo"},
        report_to="none", use_cpu=True, save_strategy="no", disable_tqdm=True)
    trainer = AgentGRPOTrainer(model=model, processing_class=tokenizer, args=args,
                               reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                               train_dataset=Dataset.from_dict({"prompt": ["hello"] * MINI}))
    trainer.model.train()
    for micro in MICRO_SIZES:
        for rows, (value, grad) in _trl(trainer, micro, agg):
            _assert_same(value, grad, *_native(rows, agg, None), f"TRL micro {micro}")
    for _rows, (value, grad) in _trl(trainer, 2, agg, unchanged=True):
        assert value == 0 and torch.count_nonzero(grad) == 0
