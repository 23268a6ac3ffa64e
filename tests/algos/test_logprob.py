"""Token log-probs and entropies from logits (hand values, torch reference, custom backward)."""
from __future__ import annotations

import math

import pytest
import torch

from agentgrpo.algos import entropy_from_logits, logprobs_from_logits


def test_logprob_and_entropy_by_hand():
    logits = torch.tensor([[[0.0, math.log(3.0)], [5.0, 5.0]]])  # p = (1/4, 3/4) and (1/2, 1/2)
    labels = torch.tensor([[1, 0]])
    expected = [math.log(0.75), math.log(0.5)]
    assert logprobs_from_logits(logits, labels).tolist()[0] == pytest.approx(expected)
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert entropy_from_logits(logits).tolist()[0] == pytest.approx([h, math.log(2)], rel=1e-6)


@pytest.mark.parametrize("chunk_size", [None, 1, 5, 64])
def test_matches_log_softmax_reference_forward_and_backward(chunk_size):
    torch.manual_seed(0)
    logits = (3 * torch.randn(3, 7, 50)).requires_grad_(True)
    labels = torch.randint(0, 50, (3, 7))
    weights = torch.randn(3, 7)
    ours = logprobs_from_logits(logits, labels, chunk_size=chunk_size)
    (ours * weights).sum().backward()
    grad_ours = logits.grad.clone()
    logits.grad = None
    reference = torch.log_softmax(logits, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    (reference * weights).sum().backward()
    torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad_ours, logits.grad, rtol=1e-5, atol=1e-6)
    ent = entropy_from_logits(logits, chunk_size=chunk_size)
    probs = torch.softmax(logits, -1)
    reference_entropy = -(probs * torch.log_softmax(logits, -1)).sum(-1)
    torch.testing.assert_close(ent, reference_entropy, rtol=1e-5, atol=1e-5)


def test_bfloat16_logits():
    torch.manual_seed(1)
    logits32 = 4 * torch.randn(2, 5, 300)
    logits = logits32.to(torch.bfloat16).requires_grad_(True)
    labels = torch.randint(0, 300, (2, 5))
    out = logprobs_from_logits(logits, labels, chunk_size=3)
    assert out.dtype == torch.float32
    reference = torch.log_softmax(logits.detach().float(), -1)
    reference = reference.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(out, reference, rtol=1e-5, atol=1e-5)  # same bf16 values, f32 math
    out.sum().backward()
    assert logits.grad.dtype == torch.bfloat16 and torch.isfinite(logits.grad).all()
    assert entropy_from_logits(logits).dtype == torch.float32


def test_without_grad_and_shape_checks():
    with torch.no_grad():
        out = logprobs_from_logits(torch.zeros(1, 2, 4), torch.tensor([[0, 3]]))
    assert out.tolist()[0] == pytest.approx([-math.log(4)] * 2)
    with pytest.raises(ValueError, match="labels"):
        logprobs_from_logits(torch.zeros(1, 2, 4), torch.tensor([[0, 3, 1]]))
