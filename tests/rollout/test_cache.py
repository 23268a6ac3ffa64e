"""The ragged cache and its packed forward: any mix of decoding and prefilling rows gives each
row exactly the logits of a plain forward over its whole sequence."""
from __future__ import annotations

import random

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from agentgrpo.policy.presets import get_preset
from agentgrpo.rollout.attention import RAGGED_ATTENTION, ragged_attention
from agentgrpo.rollout.cache import RaggedCache
from agentgrpo.rollout.rows import Rows

VOCAB, EOS = 300, 299


@pytest.fixture(scope="module", params=[4, 2], ids=["mha", "gqa"])
def model(request) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = dict(get_preset("tiny").config, vocab_size=VOCAB, num_hidden_layers=2,
                  num_key_value_heads=request.param)
    return LlamaForCausalLM(LlamaConfig(**config)).eval()


def reference_logits(model, tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([tokens])).logits[0, -1]


def random_chunk(rng: random.Random, low: int, high: int) -> list[int]:
    return [rng.randrange(1, EOS) for _ in range(rng.randrange(low, high + 1))]


@torch.no_grad()
def check_step(model, rows: Rows, sequences: list[list[int]]) -> torch.Tensor:
    """One packed step; every stepped row's logits equal a plain forward of its sequence."""
    with ragged_attention(model):
        step_rows, logits = rows.step()
    for k, row in enumerate(step_rows.tolist()):
        torch.testing.assert_close(logits[k], reference_logits(model, sequences[row]), atol=1e-4, rtol=0)
    return step_rows


@torch.no_grad()
def test_decoding_and_prefilling_rows_in_one_step_match_plain_forwards(model):
    rng = random.Random(0)
    rows = Rows(model, 4, max_new_tokens=8, eos_ids=[EOS])
    sequences = [random_chunk(rng, 1, 9) for _ in range(4)]
    for row, sequence in enumerate(sequences):
        rows.start(row, list(sequence), budget=rng.randrange(1, 6))
    mixed = 0
    for _ in range(24):
        decoding_before = int(rows.decoding.sum())
        step_rows = check_step(model, rows, sequences)
        mixed += 0 < decoding_before < len(step_rows)  # a step with decoding and prefilling rows
        tokens = torch.tensor([rng.randrange(1, EOS) for _ in step_rows])
        for row, token in zip(step_rows.tolist(), tokens.tolist()):
            sequences[row].append(token)
        for row in rows.record(step_rows, tokens, torch.zeros(len(tokens))):
            # the turn ended at its budget: the engine prefills its last token with an observation
            observation = random_chunk(rng, 0, 30)
            rows.queue(row, [sequences[row][-1], *observation], budget=rng.randrange(1, 6))
            sequences[row] += observation
    assert mixed >= 3
    # cached: everything but the tokens still to feed (a decoding row's last sample, a pending chunk)
    assert rows.cache.lengths.tolist() == [len(s) - len(rows.pending.get(r, [s[-1]])) for r, s in enumerate(sequences)]
    assert rows.cache.capacity >= max(rows.cache.lengths.tolist())


@torch.no_grad()
def test_turn_ends_at_end_of_turn_or_budget_and_keeps_its_tokens(model):
    rows = Rows(model, 2, max_new_tokens=4, eos_ids=[EOS])
    rows.start(0, [5, 6], budget=4)
    rows.start(1, [7], budget=2)
    with ragged_attention(model):
        step_rows, _ = rows.step()
    assert step_rows.tolist() == [0, 1]
    assert rows.record(step_rows, torch.tensor([10, 11]), torch.tensor([-0.5, -0.25])) == []
    with ragged_attention(model):
        step_rows, _ = rows.step()
    # row 1 reaches its budget of 2; row 0 samples the end-of-turn token
    assert rows.record(step_rows, torch.tensor([EOS, 12]), torch.tensor([-1.0, -2.0])) == [0, 1]
    assert rows.turn(0) == ([10, EOS], [-0.5, -1.0])
    assert rows.turn(1) == ([11, 12], [-0.25, -2.0])
    assert not rows.decoding.any()


@torch.no_grad()
def test_shared_prefix_new_episodes_in_old_rows_and_dropped_rows(model):
    rng = random.Random(1)
    prefix = random_chunk(rng, 12, 12)
    rows = Rows(model, 3, max_new_tokens=8, eos_ids=[EOS])
    with ragged_attention(model):
        rows.prefill_prefix(prefix)
    assert rows.cache.prefix_length == 12
    sequences = []
    for row in range(3):
        tail = random_chunk(rng, 1, 5)
        rows.start(row, tail, budget=8)
        sequences.append(prefix + tail)
    check_step(model, rows, sequences)
    # row 1's episode ends; a new one takes the row (prefix copied back, old slots masked)
    rows.release(1)
    tail = random_chunk(rng, 1, 4)
    rows.start(1, tail, budget=8)
    sequences[1] = prefix + tail
    for row in (0, 2):
        rows.queue(row, [3], budget=8)
        sequences[row].append(3)
    check_step(model, rows, sequences)
    # row 0 ends with nobody waiting: keep rows 2 and 1 (renumbered 0 and 1)
    rows.release(0)
    rows.keep([2, 1])
    sequences = [sequences[2], sequences[1]]
    for row in range(2):
        chunk = random_chunk(rng, 1, 20)
        rows.queue(row, chunk, budget=8)
        sequences[row] += chunk
    check_step(model, rows, sequences)
    assert rows.cache.rows == 2


def test_buffers_grow_keep_their_contents_and_stay_zero_beyond():
    cache = RaggedCache(2, layers=1, kv_heads=1, head_dim=2, dtype=torch.float32, device="cpu", capacity=1)
    assert cache.capacity == 64
    key = torch.arange(8.0).reshape(1, 1, 4, 2)
    cache.write(0, key, key + 100, torch.tensor([1, 1, 0, 0]), torch.tensor([0, 1, 0, 63]))
    cache.lengths = torch.tensor([64, 2])
    cache.reserve(64)
    assert cache.capacity == 64
    cache.reserve(65)
    assert cache.capacity == 128  # 1.5 x 64 = 96, rounded up to 64s
    assert cache.keys[0][1, 0, :2].tolist() == [[0.0, 1.0], [2.0, 3.0]]
    assert cache.values[0][0, 0, 63].tolist() == [106.0, 107.0]
    assert cache.keys[0][:, :, 64:].abs().sum() == 0
    cache.keep_rows(torch.tensor([1]))  # row 1 only; the capacity stays
    assert cache.capacity == 128 and cache.lengths.tolist() == [2]
    assert cache.keys[0][0, 0, :2].tolist() == [[0.0, 1.0], [2.0, 3.0]]
    assert cache.keys[0][:, :, 2:].abs().sum() == 0


@torch.no_grad()
def test_ragged_attention_is_plain_sdpa_outside_a_step_and_is_restored(model):
    ids = torch.tensor([[5, 6, 7, 8]])
    before = model.config._attn_implementation
    expected = model(input_ids=ids).logits
    with ragged_attention(model):
        assert model.config._attn_implementation == RAGGED_ATTENTION
        torch.testing.assert_close(model(input_ids=ids).logits, expected, atol=1e-5, rtol=0)
    assert model.config._attn_implementation == before


@torch.no_grad()
def test_regrouping_rows_by_length_moves_their_caches_not_their_draws(model):
    rng = random.Random(2)
    prefix = random_chunk(rng, 12, 12)
    rows = Rows(model, 5, max_new_tokens=8, eos_ids=[EOS], bucket_rows=2)
    with ragged_attention(model):
        rows.prefill_prefix(prefix)
    sequences = []
    for row, own in enumerate([30, 2, 25, 4, 10]):
        tail = random_chunk(rng, own, own)
        rows.start(row, tail, budget=8)
        sequences.append(prefix + tail)

    def decode_step(expected_rows: list[int]) -> None:
        step_rows = check_step(model, rows, sequences)
        assert step_rows.tolist() == expected_rows
        tokens = torch.tensor([rng.randrange(1, EOS) for _ in step_rows])
        for row, token in zip(step_rows.tolist(), tokens.tolist()):
            sequences[row].append(token)
        assert rows.record(step_rows, tokens, torch.zeros(len(tokens))) == []

    decode_step([0, 1, 2, 3, 4])
    assert rows.cache.lengths.tolist() == [42, 14, 37, 16, 22]
    # by length rows 1, 3 | 4, 2 | 0: rows 1 and 2 are in their bucket already; 0, 3 and 4 move
    order = rows.regroup()
    assert order == [3, 1, 2, 4, 0]
    sequences = [sequences[row] for row in order]
    assert rows.cache.lengths.tolist() == [16, 14, 37, 22, 42]
    assert rows.regroup() is None  # grouped: nothing moves
    # every row's logits still match a plain forward, and rows are returned in their old order
    decode_step([4, 1, 2, 0, 3])
    _, plan, _ = rows._plan()  # the next step's plan: each bucket as wide as its longest row
    assert plan.buckets == [(0, 2, 18), (2, 4, 39), (4, 5, 44)]
    # dropping a row keeps the others' draw order
    rows.release(2)
    rows.keep([0, 1, 3, 4])
    assert rows.draw_order.tolist() == [2, 1, 3, 0]
