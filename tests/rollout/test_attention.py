"""The shared-prefix decode attention equals plain attention over each row's full slots."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from agentgrpo.rollout.attention import _decode_with_shared_prefix, additive_mask


@pytest.mark.parametrize("buckets", [
    [(0, 5, 30)],                           # one bucket, as wide as the longest row
    [(0, 2, 30), (2, 4, 12), (4, 5, 27)],   # each bucket as wide as its longest row
    [(0, 3, 30), (3, 4, 1), (4, 5, 27)],    # the idle row alone: no slots of its own to read
])
def test_shared_prefix_decode_matches_attention_over_the_whole_row(buckets):
    gen = torch.Generator().manual_seed(0)
    rows, kv_heads, group, dim, prefix, capacity = 5, 2, 3, 16, 7, 40
    keys = torch.randn(rows, kv_heads, capacity, dim, generator=gen)
    values = torch.randn(rows, kv_heads, capacity, dim, generator=gen)
    shared_k = torch.randn(kv_heads, prefix, dim, generator=gen)
    shared_v = torch.randn(kv_heads, prefix, dim, generator=gen)
    keys[:, :, :prefix] = shared_k  # every row starts with the same prefix, as start_row copies it
    values[:, :, :prefix] = shared_v
    lengths = torch.tensor([prefix + 1, 30, 12, 1, prefix + 20])  # row 3 is idle (length 1): output unused
    width = int(lengths.max())
    mask = additive_mask(torch.arange(width)[None, :] < lengths[:, None], torch.float32)[:, None, None, :]
    q = torch.randn(rows, kv_heads, group, dim, generator=gen)
    scale = dim**-0.5
    got = _decode_with_shared_prefix(q, keys, values, (shared_k, shared_v), mask, scale, buckets)
    expected = F.scaled_dot_product_attention(q, keys[:, :, :width], values[:, :, :width], attn_mask=mask,
                                              scale=scale)
    live = [0, 1, 2, 4]
    torch.testing.assert_close(got[live], expected[live], rtol=1e-5, atol=1e-6)
    assert torch.isfinite(got).all()  # the idle row gets the prefix's average, never NaN
