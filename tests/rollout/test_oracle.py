"""The oracle's shared-slot cache (``GrowableCache``): chunked, ragged, holey appends give exactly
the logits of a plain forward, so the round-based oracle engine is a trustworthy reference."""
from __future__ import annotations

import random

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from agentgrpo.policy.presets import get_preset

from .oracle_cache import GrowableCache, forward_chunk
from .oracle_engine import prefill_groups


@pytest.fixture(scope="module")
def model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = dict(get_preset("tiny").config, vocab_size=300, num_hidden_layers=2)
    return LlamaForCausalLM(LlamaConfig(**config)).eval()


def reference_logits(model, tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([tokens])).logits[0, -1]


@torch.no_grad()
def test_ragged_chunks_with_holes_match_plain_forward(model):
    rng = random.Random(0)
    rows = 3
    sequences: list[list[int]] = [[] for _ in range(rows)]
    cache = GrowableCache(rows)
    for step in range(8):
        # the first chunk gives every row a token; later rows may append nothing (holes)
        chunks = [[rng.randrange(1, 300) for _ in range(rng.randrange(0 if step else 1, 7))] for _ in range(rows)]
        logits = forward_chunk(model, cache, chunks, pad_token_id=0)
        for row in range(rows):
            sequences[row] += chunks[row]
            if chunks[row]:
                torch.testing.assert_close(logits[row], reference_logits(model, sequences[row]), atol=1e-4, rtol=0)
    assert cache.hole_fraction() > 0
    assert cache.valid.sum(dim=1).tolist() == [len(s) for s in sequences]


@torch.no_grad()
def test_compaction_and_row_selection_keep_the_conversation(model):
    rng = random.Random(1)
    sequences: list[list[int]] = [[] for _ in range(3)]
    cache = GrowableCache(3)
    for step in range(5):
        chunks = [[rng.randrange(1, 300) for _ in range(rng.randrange(1 if step == 0 else 0, 9))] for _ in range(3)]
        forward_chunk(model, cache, chunks, pad_token_id=0)
        for row in range(3):
            sequences[row] += chunks[row]
    before = cache.length
    cache.compact()
    assert cache.hole_fraction() < 1e-9 or cache.length < before
    assert cache.valid.sum(dim=1).tolist() == [len(s) for s in sequences]
    cache.select_rows(torch.tensor([2, 0]))
    sequences = [sequences[2], sequences[0]]
    chunks = [[5, 6, 7], [8]]
    logits = forward_chunk(model, cache, chunks, pad_token_id=0)
    for row in range(2):
        sequences[row] += chunks[row]
        torch.testing.assert_close(logits[row], reference_logits(model, sequences[row]), atol=1e-4, rtol=0)


@torch.no_grad()
def test_broadcast_prefix_equals_per_row_prefill(model):
    prefix = list(range(10, 40))
    cache = GrowableCache(1)
    forward_chunk(model, cache, [prefix], pad_token_id=0)
    cache.repeat_rows(3)
    tails = [[1, 2], [3], [4, 5, 6]]
    logits = forward_chunk(model, cache, tails, pad_token_id=0)
    for row, tail in enumerate(tails):
        torch.testing.assert_close(logits[row], reference_logits(model, prefix + tail), atol=1e-4, rtol=0)


@torch.no_grad()
def test_decoding_a_few_taken_rows_then_putting_them_back(model):
    rng = random.Random(2)
    sequences = [[rng.randrange(1, 300) for _ in range(rng.randrange(3, 9))] for _ in range(4)]
    cache = GrowableCache(4)
    forward_chunk(model, cache, [list(s) for s in sequences], pad_token_id=0)
    rows = torch.tensor([1, 3])
    part = cache.take_rows(rows)
    for _ in range(3):  # rows 1 and 3 decode alone
        chunk = [[rng.randrange(1, 300)], [rng.randrange(1, 300)]]
        logits = forward_chunk(model, part, chunk, pad_token_id=0)
        for k, row in enumerate(rows.tolist()):
            sequences[row] += chunk[k]
            torch.testing.assert_close(logits[k], reference_logits(model, sequences[row]), atol=1e-4, rtol=0)
    cache.put_back(part, rows)
    assert cache.valid.sum(dim=1).tolist() == [len(s) for s in sequences]
    chunks = [[7], [8, 9], [10], [11]]
    logits = forward_chunk(model, cache, chunks, pad_token_id=0)
    for row in range(4):
        sequences[row] += chunks[row]
        torch.testing.assert_close(logits[row], reference_logits(model, sequences[row]), atol=1e-4, rtol=0)


# ---- the oracle engine's prefill grouping (its dynamic programme is exact) ----------------------
def _padded_cost(lengths, groups, overhead):
    *side, main = groups
    cost = sum(len(g) * max(lengths[i] for i in g) + overhead for g in side)
    return cost + len(lengths) * max(lengths[i] for i in main)


@pytest.mark.parametrize("lengths", [[20, 30, 600, 25, 200, 210, 22], [5] * 6, [1, 100], [300]])
def test_prefill_groups_partition_rows_at_the_cheapest_cost(lengths):
    overhead = 64
    groups = prefill_groups(lengths, overhead)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert groups[-1], "the main group is never empty"
    # brute force over contiguous cuts of the longest-first order
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    best = float("inf")
    for mask in range(2 ** (len(lengths) - 1)):
        cuts = [0] + [k + 1 for k in range(len(lengths) - 1) if mask >> k & 1] + [len(lengths)]
        candidate = [order[a:b] for a, b in zip(cuts, cuts[1:])]
        best = min(best, _padded_cost(lengths, candidate, overhead))
    assert _padded_cost(lengths, groups, overhead) == best
