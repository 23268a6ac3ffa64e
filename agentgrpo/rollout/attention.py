"""Attention over the ragged cache: one packed forward for decoding and prefilling rows.

A continuous-batching step feeds the model ONE packed sequence, ``(1, T)``: first one
token for every decoding row, then the whole pending chunk (a tool result, a user reply,
a first prompt) of every row that is prefilling. Linear layers see exactly T tokens, no
padding. In each layer the registered attention function (``RAGGED_ATTENTION``, used
inside ``ragged_attention(model)``) writes the new keys/values into their rows'
slots of the ``RaggedCache`` and attends:

- decoding rows: one batched SDPA of every cache row's query against its own slots,
  ``(R, H_kv, G, D)`` queries (the G query heads of a key/value head side by side) over
  ``(R, H_kv, W, D)`` keys masked to each row's length (W = the longest row);
- prefilling rows: one SDPA per row over its own slots, causal from its old length.

The model's code (projections, RoPE from the step's ``position_ids``, MLP, LM head) runs
unchanged; only the attention function is swapped, for the duration of the context.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from agentgrpo.rollout.cache import RaggedCache

RAGGED_ATTENTION = "agentgrpo_ragged"


@dataclass
class Segment:
    """One prefilling row: packed tokens ``[start, start + count)`` go to slots ``[slot, slot + count)``.

    causal: (count, slot + count) additive mask, token i sees the row's slots up to ``slot + i``.
    """

    row: int
    start: int
    count: int
    slot: int
    causal: torch.Tensor

    @classmethod
    def make(cls, row: int, start: int, count: int, slot: int, dtype: torch.dtype, device: torch.device) -> Segment:
        slots = torch.arange(slot + count, device=device)
        visible = slots[None, :] <= (slot + torch.arange(count, device=device))[:, None]
        return cls(row, start, count, slot, additive_mask(visible, dtype))


@dataclass
class StepPlan:
    """Where the T packed tokens of one forward go and what they attend to.

    write_rows, write_slots: (T,) cache row and slot of each token (slot = RoPE position).
    decode_rows: (N,) rows of the first N packed tokens (one each), ascending.
    decode_mask: (R, 1, 1, W) additive mask (0 where slot < the row's length after this step,
        -inf beyond); None if N = 0.
    segments: the prefilling rows, packed after the decoding tokens.
    buckets: contiguous row ranges ``(first, end, width)`` covering all R rows, each with the
        longest length among its rows: decoding reads a row's own slots only up to its bucket's
        width (empty: one bucket of width W).
    """

    cache: RaggedCache
    write_rows: torch.Tensor
    write_slots: torch.Tensor
    decode_rows: torch.Tensor
    decode_mask: torch.Tensor | None
    segments: list[Segment]
    buckets: list[tuple[int, int, int]] = field(default_factory=list)


def ragged_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    rollout_plan: StepPlan | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """The ``AttentionInterface`` function: query/key/value (1, H, T, D) → output (1, T, H_q, D).

    Without a ``rollout_plan`` (a forward outside the engine) it is plain SDPA.
    """
    if rollout_plan is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    plan, layer = rollout_plan, module.layer_idx
    plan.cache.write(layer, key, value, plan.write_rows, plan.write_slots)
    keys, values = plan.cache.keys[layer], plan.cache.values[layer]
    _, heads, tokens, dim = query.shape
    out = query.new_empty(tokens, heads, dim)
    n = plan.decode_rows.shape[0]
    if n:
        out[:n] = _decode(query[0, :, :n].transpose(0, 1), keys, values, plan, layer, scaling)
    for seg in plan.segments:
        end = seg.slot + seg.count
        q = query[:, :, seg.start : seg.start + seg.count]  # (1, H_q, n, D)
        o = F.scaled_dot_product_attention(
            q, keys[seg.row : seg.row + 1, :, :end], values[seg.row : seg.row + 1, :, :end],
            attn_mask=seg.causal, scale=scaling, enable_gqa=keys.shape[1] != heads)
        out[seg.start : seg.start + seg.count] = o[0].transpose(0, 1)
    return out[None], None


def _decode(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, plan: StepPlan, layer: int,
            scaling: float | None) -> torch.Tensor:
    """q (N, H_q, D) of the decoding rows → their outputs (N, H_q, D), batched over all cache rows."""
    rows, kv_heads, _, dim = keys.shape
    n, heads, _ = q.shape
    width = plan.decode_mask.shape[-1]
    if n == rows:  # every row decodes (rows are ascending): no scatter
        full = q
    else:  # rows that are prefilling or idle ride along with a zero query; their output is dropped
        full = q.new_zeros(rows, heads, dim)
        full[plan.decode_rows] = q
    grouped = full.reshape(rows, kv_heads, heads // kv_heads, dim)
    if plan.cache.prefix and rows > 1:
        o = _decode_with_shared_prefix(grouped, keys, values, plan.cache.prefix[layer], plan.decode_mask,
                                       scaling if scaling is not None else dim**-0.5,
                                       plan.buckets or [(0, rows, width)])
    else:
        o = F.scaled_dot_product_attention(grouped, keys[:, :, :width], values[:, :, :width],
                                           attn_mask=plan.decode_mask, scale=scaling)
    o = o.reshape(rows, heads, dim)
    return o if n == rows else o[plan.decode_rows]


def _decode_with_shared_prefix(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                               prefix: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor,
                               scale: float, buckets: list[tuple[int, int, int]]) -> torch.Tensor:
    """Decode attention that reads the shared prefix once instead of once per row.

    Decoding on CPU is bound by reading the cache, and every row holds a copy of the same
    system prompt. So the rows' queries (R, H_kv, G, D) attend to the one saved prefix
    (H_kv, P, D) as a single matrix product, to their own slots [P, width) separately, and the
    two softmax parts are merged by their maxima and sums (exact up to rounding). The own
    part runs per bucket of rows, each only as wide as its longest row: rows of similar
    length share a bucket (``Rows.regroup``), so short rows do not pay for long ones.
    """
    rows, kv_heads, group, dim = q.shape
    prefix_keys, prefix_values = prefix
    p = prefix_keys.shape[1]
    # prefix part: (H_kv, R·G, D) @ (H_kv, D, P)
    qh = q.permute(1, 0, 2, 3).reshape(kv_heads, rows * group, dim)
    s1 = torch.matmul(qh, prefix_keys.transpose(1, 2)) * scale
    m1 = s1.amax(dim=-1, keepdim=True)
    e1 = torch.exp(s1 - m1)
    l1 = e1.sum(dim=-1, keepdim=True)
    o1 = torch.matmul(e1, prefix_values)  # (H_kv, R·G, D)

    def per_row(t: torch.Tensor) -> torch.Tensor:  # (H_kv, R·G, X) -> (R, H_kv, G, X)
        return t.reshape(kv_heads, rows, group, t.shape[-1]).permute(1, 0, 2, 3)

    m1, l1, o1 = per_row(m1), per_row(l1), per_row(o1)
    out = torch.empty_like(q)
    for first, end, width in buckets:
        if width <= p:  # idle rows (length 1): nothing of their own to read, and their output is dropped
            out[first:end] = o1[first:end] / l1[first:end]
            continue
        # each row's own part: slots [P, width), masked past its length
        qb, m1b, l1b = q[first:end], m1[first:end], l1[first:end]
        s2 = torch.matmul(qb, keys[first:end, :, p:width].transpose(-1, -2)) * scale + mask[first:end, ..., p:width]
        m = torch.maximum(m1b, s2.amax(dim=-1, keepdim=True))  # finite: the prefix part always is
        e2 = torch.exp(s2 - m)
        w1 = torch.exp(m1b - m)
        own = torch.matmul(e2, values[first:end, :, p:width])
        out[first:end] = (o1[first:end] * w1 + own) / (l1b * w1 + e2.sum(dim=-1, keepdim=True))
    return out


def additive_mask(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """0 where ``visible``, -inf elsewhere: SDPA would convert a boolean mask so in every layer."""
    return torch.zeros(visible.shape, dtype=dtype, device=visible.device).masked_fill_(~visible, float("-inf"))


@contextmanager
def ragged_attention(model: torch.nn.Module) -> Iterator[None]:
    """Run ``model``'s attention through ``ragged_attention_forward`` inside the block."""
    # registered on first use: importing transformers' attention registry costs seconds
    from transformers import AttentionInterface

    AttentionInterface.register(RAGGED_ATTENTION, ragged_attention_forward)
    config = model.config
    previous = config._attn_implementation
    config._attn_implementation = RAGGED_ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = previous
