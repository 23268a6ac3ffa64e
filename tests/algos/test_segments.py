"""Runs of the response mask (turns / actions): numbering, counting, summing."""
from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgrpo.algos.segments import gather_segments, max_segments, segment_ids, segment_starts, segment_sum

from . import oracles


def test_segment_ids_by_hand():
    mask = torch.tensor([[0, 1, 1, 0, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0], [1, 0, 1, 0, 1]])
    ids, counts = segment_ids(mask)
    assert ids.tolist() == [[-1, 0, 0, -1, 1], [0, 0, 0, 0, 0], [-1] * 5, [0, -1, 1, -1, 2]]
    assert counts.tolist() == [2, 1, 0, 3]
    assert segment_starts(mask)[0].tolist() == [False, True, False, False, True]


def test_segment_sum_and_gather_by_hand():
    mask = torch.tensor([[0, 1, 1, 0, 1]])
    values = torch.tensor([[9.0, 1.0, 2.0, 9.0, 4.0]])  # 9s sit on inactive tokens: ignored
    ids, _ = segment_ids(mask)
    sums = segment_sum(values, ids, max_segments(5))  # J bound = 3
    assert sums.tolist() == [[1.0 + 2.0, 4.0, 0.0]]
    assert gather_segments(sums, ids, fill=-1.0).tolist() == [[-1.0, 3.0, 3.0, -1.0, 4.0]]


def test_gather_beyond_width_gets_fill():
    ids = torch.tensor([[0, 1, 2, -1]])
    assert gather_segments(torch.tensor([[5.0, 6.0]]), ids).tolist() == [[5.0, 6.0, 0.0, 0.0]]


def test_max_segments_is_a_bound():
    # alternating 1,0,1,0,... has the most runs a row can hold
    for width in range(1, 12):
        mask = torch.tensor([[1 - (t % 2) for t in range(width)]])
        assert segment_ids(mask)[1].item() == max_segments(width)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 1), min_size=7, max_size=7), min_size=1, max_size=4))
def test_segments_match_loop_oracle(rows):
    mask = torch.tensor(rows)
    ids, counts = segment_ids(mask)
    values = torch.arange(mask.numel(), dtype=torch.float32).reshape(mask.shape) + 1
    sums = segment_sum(values, ids, max_segments(7))
    for b, row in enumerate(rows):
        runs = oracles.runs(row)
        assert counts[b].item() == len(runs)
        for j, run in enumerate(runs):
            assert all(ids[b, t].item() == j for t in run)
            assert sums[b, j].item() == sum(values[b, t].item() for t in run)
        assert all(ids[b, t].item() == -1 for t in range(7) if not row[t])
