"""grpo_objective: hand-computed terms, token-mean KL/LLDS whatever the PG aggregation,
and micro-batches that add up to the batch."""
from __future__ import annotations

import math

import pytest
import torch
from helpers import objective

from agentgrpo.algos import AGG_MODES, OBJECTIVE_METRICS, preserve_token_count

MASK = torch.tensor([[1, 1, 0], [1, 0, 1]])  # row 1: two actions (a tool observation between)
TOKEN_ADV = torch.tensor([[0.5, 0.5, 0.0], [-1.0, 0.0, -1.0]])
SEQ_ADV = torch.tensor([1.0, -2.0])  # preserve set: row 0 (2 tokens)
LOGP = [[-0.1, 0.2, 0.0], [0.3, 0.0, -0.2]]
ENTROPY = torch.tensor([[1.0, 2.0, 9.0], [3.0, 9.0, 5.0]])  # 9s are off the mask


def _logp() -> torch.Tensor:
    return torch.tensor(LOGP, requires_grad=True)


def _ppo_token(adv: float, logp: float, clip: float = 0.2) -> float:
    ratio = math.exp(logp)  # old_logp = 0
    return max(-adv * ratio, -adv * min(max(ratio, 1 - clip), 1 + clip))


def test_every_term_by_hand():
    pg_tokens = [_ppo_token(0.5, -0.1), _ppo_token(0.5, 0.2), _ppo_token(-1.0, 0.3), _ppo_token(-1.0, -0.2)]
    pg = (pg_tokens[0] + pg_tokens[1]) / 2 + (pg_tokens[2] + pg_tokens[3]) / 2  # seq-mean-token-sum, B = 2
    kl = (-0.1 + 0.2 + 0.3 - 0.2) / 4  # k1 against ref = 0, mean over the 4 response tokens
    llds = (0.1 + 0.0) / 2  # token gate: Δ = old − logp = (0.1, −0.2) on row 0's 2 tokens
    entropy = (1 + 2 + 3 + 5) / 4
    loss, metrics = objective(
        _logp(), torch.zeros(2, 3), TOKEN_ADV, MASK, seq_adv=SEQ_ADV, ref_logp=torch.zeros(2, 3),
        entropy=ENTROPY, loss_agg="seq-mean-token-sum", kl_coef=0.1, kl_kind="k1", llds_coef=0.5,
        llds_gate="token", entropy_coef=0.01)
    assert set(metrics) == set(OBJECTIVE_METRICS)
    assert metrics["loss/pg"] == pytest.approx(pg, rel=1e-6)
    assert metrics["loss/kl"] == pytest.approx(kl, rel=1e-6)
    assert metrics["loss/llds"] == pytest.approx(llds, rel=1e-6)
    assert metrics["loss/entropy"] == pytest.approx(entropy, rel=1e-6)
    total = pg + 0.1 * kl + 0.5 * llds - 0.01 * entropy
    assert loss.item() == pytest.approx(total, rel=1e-6) and metrics["loss/total"] == pytest.approx(total, rel=1e-6)
    # the action gate: row 0's one action rose in total (0.1 − 0.2 < 0), so nothing is penalised
    _, gated = objective(_logp(), torch.zeros(2, 3), TOKEN_ADV, MASK, seq_adv=SEQ_ADV, llds_coef=0.5)
    assert gated["loss/llds"] == 0.0 and gated["algo/lld_action_rate"] == 0.0
    assert gated["algo/llds_preserve_frac"] == 0.5


@pytest.mark.parametrize("agg", AGG_MODES)
def test_kl_and_llds_do_not_depend_on_the_pg_aggregation(agg):
    kwargs = dict(seq_adv=SEQ_ADV, ref_logp=torch.zeros(2, 3), kl_coef=0.1, llds_coef=0.5, llds_gate="token")
    _, base = objective(_logp(), torch.zeros(2, 3), TOKEN_ADV, MASK, loss_agg="token-mean", **kwargs)
    _, other = objective(_logp(), torch.zeros(2, 3), TOKEN_ADV, MASK, loss_agg=agg, **kwargs)
    assert other["loss/kl"] == base["loss/kl"] and other["loss/llds"] == base["loss/llds"]


def test_the_sign_of_token_advantages_stands_in_for_the_sequence_advantage():
    kwargs = dict(ref_logp=torch.zeros(2, 3), kl_coef=0.1, llds_coef=0.5, llds_gate="token")
    with_seq, _ = objective(_logp(), torch.zeros(2, 3), TOKEN_ADV, MASK, seq_adv=SEQ_ADV, **kwargs)
    without, _ = objective(_logp(), torch.zeros(2, 3), TOKEN_ADV, MASK, **kwargs)
    assert torch.equal(with_seq, without)
    assert int(preserve_token_count(SEQ_ADV, MASK)) == int(preserve_token_count(TOKEN_ADV, MASK)) == 2


@pytest.mark.parametrize("agg", AGG_MODES)
def test_micro_batches_with_the_batch_counts_add_up_to_the_batch(agg):
    g = torch.Generator().manual_seed(len(agg))
    mask = (torch.rand(6, 12, generator=g) > 0.3).long()
    adv = torch.randn(6, generator=g)
    token_adv = adv[:, None] * mask
    old = -torch.rand(6, 12, generator=g)
    ref = -torch.rand(6, 12, generator=g)
    logp = (old + 0.2 * torch.randn(6, 12, generator=g)).requires_grad_()
    coefs = dict(ref_logp=ref, kl_coef=0.05, llds_coef=0.2, loss_agg=agg, llds_gate="token")
    whole, _ = objective(logp, old, token_adv, mask, seq_adv=adv, **coefs)
    (whole_grad,) = torch.autograd.grad(whole, logp)
    counts = dict(num_tokens=mask.sum(), num_seqs=6, num_preserve_tokens=preserve_token_count(adv, mask))
    parts = sum(objective(logp[rows], old[rows], token_adv[rows], mask[rows], seq_adv=adv[rows],
                               **{**coefs, "ref_logp": ref[rows]}, **counts)[0]
                for rows in (slice(0, 2), slice(2, 6)))
    (parts_grad,) = torch.autograd.grad(parts, logp)
    assert torch.allclose(parts, whole, rtol=1e-6, atol=1e-7)
    assert torch.allclose(parts_grad, whole_grad, rtol=1e-6, atol=1e-8)


def test_bad_coefficients_and_missing_inputs_are_refused():
    args = (_logp(), torch.zeros(2, 3), TOKEN_ADV, MASK)
    with pytest.raises(ValueError, match="kl_coef"):
        objective(*args, kl_coef=-0.1)
    with pytest.raises(ValueError, match="ref_logp"):
        objective(*args, kl_coef=0.1)
    with pytest.raises(ValueError, match="entropy"):
        objective(*args, entropy_coef=0.1)
