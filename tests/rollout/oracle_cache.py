"""The round-based engine's KV cache (shared slots with holes) and its chunked forward.

The test oracle of ``agentgrpo.rollout``: the cache the engine used before continuous
batching, kept here unchanged so ``oracle_engine`` can replay the old engine. Its own
tests are in ``test_oracle.py``.

A batched KV cache for multi-turn rollouts: amortised appends, holes, compaction.

HF's ``DynamicCache`` appends with ``torch.cat``, which copies the whole cache on every
decode step (O(T²) memory traffic over an episode). ``GrowableCache`` keeps each
layer's keys/values in a buffer with spare capacity that doubles when full, and hands
the attention a view of the filled part.

Rows of one batch are different episodes that grow by different amounts each turn
(a tool result here, a user reply there). We append every chunk at the same cache
indices for all rows and mark the unused slots as *holes* in a 2-D validity mask that
doubles as the attention mask; positions (for RoPE) are tracked per row, so a hole
never shifts a row's positions. ``compact()`` squeezes the holes out when they pile up,
and ``select_rows()`` drops finished episodes.
"""
from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer


class GrowableLayer(DynamicLayer):
    """A cache layer whose buffers grow by doubling; ``keys``/``values`` are views."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self._k = key_states.new_empty(key_states.shape[:2] + (0,) + key_states.shape[3:])
        self._v = value_states.new_empty(value_states.shape[:2] + (0,) + value_states.shape[3:])
        self._len = 0
        self.is_initialized = True
        self._sync()

    def _sync(self) -> None:
        self.keys = self._k[:, :, : self._len]
        self.values = self._v[:, :, : self._len]

    def _reserve(self, needed: int) -> None:
        capacity = self._k.shape[2]
        if needed <= capacity:
            return
        new_capacity = max(needed, 2 * capacity, 64)
        shape = self._k.shape[:2] + (new_capacity,) + self._k.shape[3:]
        k, v = self._k.new_empty(shape), self._v.new_empty(shape)
        k[:, :, : self._len] = self._k[:, :, : self._len]
        v[:, :, : self._len] = self._v[:, :, : self._len]
        self._k, self._v = k, v

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[2]
        self._reserve(self._len + n)
        self._k[:, :, self._len : self._len + n] = key_states
        self._v[:, :, self._len : self._len + n] = value_states
        self._len += n
        self._sync()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self._len if self.is_initialized else 0

    def crop(self, max_length: int) -> None:
        if max_length < 0:
            max_length = self._len + max_length
        self._len = min(self._len, max_length)
        self._sync()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self._k, self._v = self._k[indices], self._v[indices]
            self._sync()

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.is_initialized:
            self._k = self._k.repeat_interleave(repeats, dim=0)
            self._v = self._v.repeat_interleave(repeats, dim=0)
            self._sync()

    def take(self, rows: torch.Tensor) -> GrowableLayer:
        """A new layer with copies of ``rows``."""
        part = GrowableLayer()
        if self.is_initialized:
            part.dtype, part.device, part.is_initialized = self.dtype, self.device, True
            part._k, part._v, part._len = self._k[rows, :, : self._len], self._v[rows, :, : self._len], self._len
            part._sync()
        return part

    def put_back(self, part: GrowableLayer, rows: torch.Tensor) -> None:
        """Write ``part`` (rows taken earlier, grown since) back at ``rows``; other rows get hole slots."""
        if not part.is_initialized:
            return
        self._reserve(part._len)
        # the other rows' new slots are holes: zero them (masked, but must be finite for SDPA)
        self._k[:, :, self._len : part._len] = 0
        self._v[:, :, self._len : part._len] = 0
        self._k[rows, :, : part._len] = part._k[:, :, : part._len]
        self._v[rows, :, : part._len] = part._v[:, :, : part._len]
        self._len = part._len
        self._sync()

    def gather_positions(self, index: torch.Tensor) -> None:
        """Keep, per row, the cache slots listed in ``index`` (B, N), in that order."""
        if not self.is_initialized:
            return
        b, h, _, d = self._k.shape
        idx = index[:, None, :, None].expand(b, h, index.shape[1], d)
        self._k = torch.gather(self._k[:, :, : self._len], 2, idx)
        self._v = torch.gather(self._v[:, :, : self._len], 2, idx)
        self._len = index.shape[1]
        self._sync()


class GrowableCache(Cache):
    """A ``transformers`` cache of ``GrowableLayer``s plus per-row validity and positions.

    valid: (B, C) bool — slot c of row b holds a real token (False = hole).
    next_position: (B,) long — RoPE position of the row's next real token.
    """

    def __init__(self, batch_size: int, device: torch.device | str = "cpu"):
        super().__init__(layer_class_to_replicate=GrowableLayer)
        self.valid = torch.zeros(batch_size, 0, dtype=torch.bool, device=device)
        self.next_position = torch.zeros(batch_size, dtype=torch.long, device=device)

    @property
    def batch_size(self) -> int:
        return self.valid.shape[0]

    @property
    def length(self) -> int:
        return self.valid.shape[1]

    def hole_fraction(self) -> float:
        if self.valid.numel() == 0:
            return 0.0
        return 1.0 - self.valid.float().mean().item()

    def plan_chunk(self, counts: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Attention mask and position ids for appending a right-padded chunk.

        counts: (B,) number of real tokens each row appends (the rest of ``width`` is holes).
        Returns ``attention_mask`` (B, C + width) and ``position_ids`` (B, width), and
        records the new slots and positions.
        """
        arange = torch.arange(width, device=self.valid.device)
        chunk_valid = arange[None, :] < counts[:, None]  # (B, width)
        position_ids = self.next_position[:, None] + torch.minimum(
            arange[None, :], (counts - 1).clamp(min=0)[:, None]
        )
        self.valid = torch.cat([self.valid, chunk_valid], dim=1)
        self.next_position = self.next_position + counts
        return self.valid.long(), position_ids

    def select_rows(self, rows: torch.Tensor) -> None:
        """Keep only ``rows`` (indices into the batch), in that order."""
        for layer in self.layers:
            layer.batch_select_indices(rows)
        self.valid = self.valid[rows]
        self.next_position = self.next_position[rows]

    def repeat_rows(self, repeats: int) -> None:
        """Broadcast a batch-of-1 cache (a shared prompt prefix) to ``repeats`` rows."""
        for layer in self.layers:
            layer.batch_repeat_interleave(repeats)
        self.valid = self.valid.repeat_interleave(repeats, dim=0)
        self.next_position = self.next_position.repeat_interleave(repeats, dim=0)

    def take_rows(self, rows: torch.Tensor) -> GrowableCache:
        """A new cache holding copies of ``rows`` (to decode a few rows without the rest)."""
        part = GrowableCache(len(rows), device=self.valid.device)
        part.layers = [layer.take(rows) for layer in self.layers]
        part.valid, part.next_position = self.valid[rows].clone(), self.next_position[rows].clone()
        return part

    def put_back(self, part: GrowableCache, rows: torch.Tensor) -> None:
        """Merge ``part`` (from ``take_rows(rows)``) back; the slots it added are holes elsewhere."""
        grown = part.length - self.length
        for layer, part_layer in zip(self.layers, part.layers):
            layer.put_back(part_layer, rows)
        self.valid = torch.cat([self.valid, self.valid.new_zeros(self.batch_size, grown)], dim=1)
        self.valid[rows] = part.valid
        self.next_position[rows] = part.next_position

    def compact(self) -> None:
        """Squeeze out holes: each row's real slots move to the front, in order."""
        counts = self.valid.sum(dim=1)
        width = int(counts.max().item()) if counts.numel() else 0
        # stable sort puts real slots (key 0) before holes (key 1), keeping their order
        order = torch.sort((~self.valid).to(torch.int8), dim=1, stable=True).indices[:, :width]
        for layer in self.layers:
            layer.gather_positions(order)
        self.valid = torch.arange(width, device=self.valid.device)[None, :] < counts[:, None]


def forward_chunk(
    model: torch.nn.Module,
    cache: GrowableCache,
    chunks: list[list[int]],
    pad_token_id: int,
) -> torch.Tensor:
    """Append one right-padded chunk per row to ``cache``; return next-token logits.

    chunks: per row, the tokens to append (may be empty: the row only gets holes).
    Returns (B, V) logits at each row's last appended token (rows with an empty
    chunk get the logits of their hole slot, which callers ignore).
    """
    device = cache.valid.device
    counts = torch.tensor([len(c) for c in chunks], dtype=torch.long, device=device)
    width = max(1, int(counts.max().item()))
    input_ids = torch.full((len(chunks), width), pad_token_id, dtype=torch.long, device=device)
    for row, chunk in enumerate(chunks):
        if chunk:
            input_ids[row, : len(chunk)] = torch.tensor(chunk, dtype=torch.long, device=device)
    attention_mask, position_ids = cache.plan_chunk(counts, width)
    last = (counts - 1).clamp(min=0)
    keep = torch.unique(last)  # only compute the vocabulary projection where it is needed
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=keep,
    )
    column = torch.searchsorted(keep, last)
    return out.logits[torch.arange(len(chunks), device=device), column]
