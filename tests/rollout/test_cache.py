"""GrowableCache: chunked, ragged, holey appends give exactly the logits of a plain forward."""
from __future__ import annotations

import random

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from agentgrpo.policy.presets import get_preset
from agentgrpo.rollout.cache import GrowableCache
from agentgrpo.rollout.sampling import forward_chunk, sample_tokens


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


def test_sampling_matches_its_distribution_and_is_seeded():
    logits = torch.log(torch.tensor([[0.1, 0.2, 0.7, 0.0]]).repeat(20000, 1) + 1e-12)
    tokens, logprobs = sample_tokens(logits, 1.0, 1.0, torch.Generator().manual_seed(0))
    freq = torch.bincount(tokens, minlength=4).float() / len(tokens)
    torch.testing.assert_close(freq, torch.tensor([0.1, 0.2, 0.7, 0.0]), atol=0.015, rtol=0)
    torch.testing.assert_close(logprobs.exp(), torch.tensor([0.1, 0.2, 0.7])[tokens], atol=1e-5, rtol=0)
    again, _ = sample_tokens(logits, 1.0, 1.0, torch.Generator().manual_seed(0))
    assert torch.equal(tokens, again)
    # top-p 0.75 keeps 0.7 and 0.2 (the mass before 0.2 is 0.7 < 0.75), renormalised
    kept, _ = sample_tokens(logits, 1.0, 0.75, torch.Generator().manual_seed(1))
    freq = torch.bincount(kept, minlength=4).float() / len(kept)
    torch.testing.assert_close(freq, torch.tensor([0.0, 0.2 / 0.9, 0.7 / 0.9, 0.0]), atol=0.015, rtol=0)
    greedy, _ = sample_tokens(logits[:3], 0.0, 1.0, None)
    assert greedy.tolist() == [2, 2, 2]


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
