"""A per-row ragged KV cache for continuous batching: every episode owns one row.

Each layer keeps keys and values in one buffer per kind, ``(R, H_kv, C, D)``: row r
holds its episode's tokens at slots ``[0, lengths[r])`` in order, so a token's slot is its
RoPE position and a row never has holes. Rows grow by different amounts at different
times (a decoding row by one token, a row that just got a tool result by hundreds), each
written at its own offset; the buffers grow by ``GROWTH`` when a row needs more room.
A finished episode's row is handed to the next episode (``start_row``), and rows of
finished episodes with nobody waiting are dropped by ``keep_rows``.

A prefix every episode shares (the system prompt) is computed once into one row, saved
(``save_prefix``) and copied into each row an episode starts in.
"""
from __future__ import annotations

import math

import torch

GROWTH = 1.5
"""Capacity factor when a buffer is full (rounded up to ``ALIGN`` slots)."""

ALIGN = 64
"""Capacities are multiples of this many slots."""


class RaggedCache:
    """Keys/values of ``rows`` episodes for ``layers`` layers; see the module docstring.

    keys[l], values[l]: (R, H_kv, C, D). lengths: (R,) long, the filled slots of each row.
    """

    def __init__(self, rows: int, layers: int, kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str, capacity: int = ALIGN):
        capacity = _aligned(max(capacity, 1))
        shape = (rows, kv_heads, capacity, head_dim)
        # zero-filled: slots past a row's length are masked, but must stay finite for the attention
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.lengths = torch.zeros(rows, dtype=torch.long, device=device)
        self.prefix: list[tuple[torch.Tensor, torch.Tensor]] = []

    @property
    def rows(self) -> int:
        return self.lengths.shape[0]

    @property
    def dtype(self) -> torch.dtype:
        return self.keys[0].dtype

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2] if self.keys else 0

    @property
    def prefix_length(self) -> int:
        return self.prefix[0][0].shape[1] if self.prefix else 0

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    def reserve(self, needed: int) -> None:
        """Make room for ``needed`` slots in every row (copies the buffers when they grow)."""
        if needed <= self.capacity:
            return
        capacity = _aligned(max(needed, math.ceil(self.capacity * GROWTH)))
        self._resize(capacity)

    def _resize(self, capacity: int) -> None:
        used = min(int(self.lengths.max()) if self.rows else 0, capacity)
        for kind in (self.keys, self.values):
            for layer, old in enumerate(kind):
                kind[layer] = _moved(old, used, capacity)

    def write(self, layer: int, key: torch.Tensor, value: torch.Tensor,
              rows: torch.Tensor, slots: torch.Tensor) -> None:
        """Store new tokens' keys/values: key, value (1, H_kv, T, D); token t goes to (rows[t], slots[t]).

        They are stored in the cache's dtype (under autocast, keys come out of RoPE in float32 and
        values in the autocast dtype; the attention would cast both to the latter anyway)."""
        keys, values = self.keys[layer], self.values[layer]
        keys[rows, :, slots] = key[0].transpose(0, 1).to(keys.dtype)
        values[rows, :, slots] = value[0].transpose(0, 1).to(values.dtype)

    def save_prefix(self, row: int, length: int) -> None:
        """Keep a copy of ``row``'s first ``length`` slots as the prefix of every new row."""
        self.prefix = [(k[row, :, :length].clone(), v[row, :, :length].clone())
                       for k, v in zip(self.keys, self.values)]

    def start_row(self, row: int) -> int:
        """Reset ``row`` for a new episode: the shared prefix (if any) and nothing else; returns its length."""
        length = self.prefix_length
        for (pk, pv), k, v in zip(self.prefix, self.keys, self.values):
            k[row, :, :length] = pk
            v[row, :, :length] = pv
        self.lengths[row] = length
        return length

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Keep only ``rows`` (in that order); the capacity stays."""
        for kind in (self.keys, self.values):
            for layer, old in enumerate(kind):
                kind[layer] = old.index_select(0, rows)
        self.lengths = self.lengths[rows]

    def permute_rows(self, order: torch.Tensor) -> None:
        """Row i takes old row ``order[i]`` in place (a permutation); only rows that move are copied,
        and only their filled slots."""
        moved = (order != torch.arange(self.rows, device=order.device)).nonzero().squeeze(1)
        if moved.numel() == 0:
            return
        used, source = int(self.lengths.max()), order[moved]
        for kind in (self.keys, self.values):
            for buffer in kind:
                buffer[moved, :, :used] = buffer[source, :, :used]
        self.lengths = self.lengths[order]


def _moved(old: torch.Tensor, used: int, capacity: int) -> torch.Tensor:
    """A buffer of ``capacity`` slots holding ``old``'s first ``used`` slots, zeros after them."""
    new = old.new_empty(old.shape[:2] + (capacity,) + old.shape[3:])
    new[:, :, :used] = old[:, :, :used]
    new[:, :, used:].zero_()
    return new


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN
