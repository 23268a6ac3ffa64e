"""Packed allowed-token masks and the restricted log-softmax, against hand-computed values."""
from __future__ import annotations

import math

import pytest
import torch

from agentgrpo.algos import (
    DISALLOWED_LOGIT,
    TokenMasks,
    entropy_from_logits,
    logprobs_from_logits,
    restrict_logits,
    unpack_allowed,
)


def test_bits_unpack_little_endian_within_each_word():
    # word 0 = 0b101 (tokens 0 and 2), word 1 = sign bit only (token 63)
    bits = torch.tensor([[0b101, -(2**31)]], dtype=torch.int32)
    allowed = unpack_allowed(bits, 64)
    assert allowed[0].nonzero().flatten().tolist() == [0, 2, 63]
    assert unpack_allowed(bits, 40)[0].nonzero().flatten().tolist() == [0, 2]  # trimmed to the vocabulary


def test_bad_masks_are_refused():
    with pytest.raises(ValueError, match="int32"):
        unpack_allowed(torch.zeros(1, 2, dtype=torch.int64), 64)
    with pytest.raises(ValueError, match="fewer than 65"):
        unpack_allowed(torch.zeros(1, 2, dtype=torch.int32), 65)


def test_restricted_logprobs_renormalise_over_the_allowed_tokens():
    logits = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    allowed = torch.tensor([[True, False, True, False]])
    restricted = restrict_logits(logits, allowed)
    assert restricted[0, 1] == DISALLOWED_LOGIT
    # p(token 2) = e^3 / (e^1 + e^3)
    expected = 3.0 - math.log(math.exp(1.0) + math.exp(3.0))
    got = logprobs_from_logits(restricted[None], torch.tensor([[2]]))[0, 0]
    assert got.item() == pytest.approx(expected, abs=1e-6)
    # the entropy stays finite: two tokens with probabilities 1/(1+e^2) and e^2/(1+e^2)
    p = 1 / (1 + math.exp(2.0))
    entropy = entropy_from_logits(restricted[None])[0, 0].item()
    assert entropy == pytest.approx(-(p * math.log(p) + (1 - p) * math.log(1 - p)), abs=1e-6)


def test_gradients_do_not_reach_disallowed_tokens():
    logits = torch.tensor([[0.5, -1.0, 2.0]], requires_grad=True)
    restricted = restrict_logits(logits, torch.tensor([[True, False, True]]))
    logprobs_from_logits(restricted[None], torch.tensor([[0]]))[0, 0].backward()
    assert logits.grad[0, 1].item() == 0.0
    assert logits.grad[0, 0].item() == pytest.approx(1 - 1 / (1 + math.exp(1.5)), abs=1e-6)


def test_token_masks_look_up_positions_row_major_and_select_rows():
    table = torch.tensor([[-1], [0b011], [0b100]], dtype=torch.int32)
    index = torch.tensor([[0, 1, 2], [2, 0, 1]])
    masks = TokenMasks(index, table)
    positions = torch.tensor([[False, True, True], [True, False, False]])
    assert masks.allowed(positions, 3).int().tolist() == [[1, 1, 0], [0, 0, 1], [0, 0, 1]]
    picked = masks.select(torch.tensor([1]), 2)
    assert picked.index.tolist() == [[2, 0]] and picked.table is table
