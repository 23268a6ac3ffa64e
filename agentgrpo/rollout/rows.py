"""The rows of a continuous batch: per-row turn state and the packed forward of one step.

Every cache row holds one running episode and is, at any step, in one of three states:
*decoding* (its last sampled token is fed next), *pending* (a chunk to prefill: its first
prompt, or the end of its last turn plus the tool result or user reply), or *idle*
(its episode ended and nobody was waiting for the row). ``step`` runs one packed forward
of all decoding and pending rows and returns each one's next-token logits; ``record``
stores the sampled tokens with tensor ops (no Python per token) and returns only the rows
whose turn ended, which the engine hands to the environment.
"""
from __future__ import annotations

import torch

from agentgrpo.rollout.attention import Segment, StepPlan, additive_mask
from agentgrpo.rollout.cache import RaggedCache


class Rows:
    """Per-row state of ``count`` cache rows (tensors on the model's device).

    decoding: (R,) bool; next_token: (R,) the token a decoding row feeds next;
    turn_tokens / turn_logprobs: (R, max_new_tokens) the current turn so far, turn_len (R,)
    of them; budget: (R,) tokens the current turn may have; pending: row → chunk to prefill.
    draw_order: (R,) the row's place when ``step`` orders its rows for sampling. It moves with
    the row when ``regroup`` moves rows, so grouping rows by length changes no sampled token.
    bucket_rows: rows per decode-attention bucket (0: one bucket of all rows).
    """

    def __init__(self, model: torch.nn.Module, count: int, max_new_tokens: int, eos_ids: list[int],
                 bucket_rows: int = 0):
        self.model = model
        parameter = next(model.parameters())
        self.device = device = parameter.device
        config = model.config
        heads = config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        self.cache = RaggedCache(count, config.num_hidden_layers, kv_heads, head_dim, _compute_dtype(parameter), device)
        self.decoding = torch.zeros(count, dtype=torch.bool, device=device)
        self.next_token = torch.zeros(count, dtype=torch.long, device=device)
        self.turn_len = torch.zeros(count, dtype=torch.long, device=device)
        self.budget = torch.ones(count, dtype=torch.long, device=device)
        self.turn_tokens = torch.zeros(count, max_new_tokens, dtype=torch.long, device=device)
        self.turn_logprobs = torch.zeros(count, max_new_tokens, dtype=torch.float32, device=device)
        self.eos = torch.tensor(eos_ids, dtype=torch.long, device=device)
        self.pending: dict[int, list[int]] = {}
        self.draw_order = torch.arange(count, device=device)
        self.bucket_rows = bucket_rows

    @property
    def count(self) -> int:
        return self.decoding.shape[0]

    # -- row life cycle ---------------------------------------------------------------
    def prefill_prefix(self, tokens: list[int]) -> None:
        """Compute a prefix every episode shares once (in row 0) and keep it for ``start``."""
        self.pending = {0: tokens}
        self.step()
        self.cache.save_prefix(0, len(tokens))

    def start(self, row: int, chunk: list[int], budget: int) -> None:
        """A new episode in ``row``: the shared prefix, then ``chunk`` (the rest of its prompt) to prefill."""
        self.cache.start_row(row)
        self.queue(row, chunk, budget)

    def queue(self, row: int, chunk: list[int], budget: int) -> None:
        """``row`` prefills ``chunk`` next, then samples a turn of at most ``budget`` tokens."""
        self.decoding[row] = False
        self.pending[row] = chunk
        self.budget[row] = budget

    def release(self, row: int) -> None:
        """``row`` holds no episode any more (it costs a masked slot until ``keep``)."""
        self.decoding[row] = False
        self.cache.lengths[row] = 1

    def keep(self, rows: list[int]) -> None:
        """Drop every other row (idle ones); rows are renumbered in the order given."""
        index = torch.tensor(rows, dtype=torch.long, device=self.device)
        self.cache.keep_rows(index)
        self._reindex(index, rows)
        # the kept rows draw in the order they drew before, numbered from 0
        self.draw_order = torch.argsort(torch.argsort(self.draw_order))

    def regroup(self) -> list[int] | None:
        """Move rows so each bucket of ``bucket_rows`` holds rows of similar length.

        Row i of bucket b belongs there if its length ranks among the b-th ``bucket_rows``
        shortest; only rows in the wrong bucket move, each swapped into a place left by one
        that leaves. Returns the new order (new row i is old row ``order[i]``) or None if
        nothing moved.
        """
        size, count = self.bucket_rows, self.count
        if size <= 0 or count <= size or not self.cache.prefix:  # buckets serve the shared-prefix decode only
            return None
        ranks = torch.empty(count, dtype=torch.long, device=self.device)
        ranks[torch.argsort(self.cache.lengths, stable=True)] = torch.arange(count, device=self.device)
        wanted, current = (ranks // size).tolist(), [row // size for row in range(count)]
        leaving = [row for row in range(count) if wanted[row] != current[row]]
        if not leaving:
            return None
        places: dict[int, list[int]] = {}
        for row in leaving:  # the places rows leave, per bucket; as many rows arrive in each
            places.setdefault(current[row], []).append(row)
        order = list(range(count))
        for row in leaving:
            order[places[wanted[row]].pop()] = row
        index = torch.tensor(order, dtype=torch.long, device=self.device)
        self.cache.permute_rows(index)
        self._reindex(index, order)
        return order

    def _reindex(self, index: torch.Tensor, rows: list[int]) -> None:
        """New row i takes old row ``rows[i]``'s state (``index`` is ``rows`` as a tensor)."""
        for name in ("decoding", "next_token", "turn_len", "budget", "turn_tokens", "turn_logprobs", "draw_order"):
            setattr(self, name, getattr(self, name)[index])
        renumber = {old: new for new, old in enumerate(rows)}
        self.pending = {renumber[row]: chunk for row, chunk in self.pending.items()}

    def turn(self, row: int) -> tuple[list[int], list[float]]:
        """The tokens and sampling log-probs of ``row``'s current (just ended) turn."""
        n = int(self.turn_len[row])
        return self.turn_tokens[row, :n].tolist(), self.turn_logprobs[row, :n].tolist()

    # -- one step --------------------------------------------------------------------
    def step(self) -> tuple[torch.Tensor, torch.Tensor]:
        """One packed forward of every decoding row's token and every pending chunk.

        Returns rows (K,) — the decoding rows, then the prefilled ones, each part in
        ``draw_order`` — and their next-token logits (K, V). Prefilled rows start a turn
        (``turn_len`` = 0).
        """
        input_ids, plan, keep = self._plan()
        logits = self.model(input_ids=input_ids[None], position_ids=plan.write_slots[None], logits_to_keep=keep,
                            use_cache=False, rollout_plan=plan).logits[0]
        prefilled = torch.tensor([seg.row for seg in plan.segments], dtype=torch.long, device=self.device)
        self.turn_len[prefilled] = 0
        n = plan.decode_rows.shape[0]
        draw = torch.cat([torch.argsort(self.draw_order[plan.decode_rows], stable=True),
                          n + torch.argsort(self.draw_order[prefilled], stable=True)])
        return torch.cat([plan.decode_rows, prefilled])[draw], logits[draw]

    def _plan(self) -> tuple[torch.Tensor, StepPlan, torch.Tensor]:
        """The packed input ids (T,), where each token goes, and the positions (K,) to project to logits."""
        cache, device = self.cache, self.device
        decode_rows = self.decoding.nonzero().squeeze(1)
        n = decode_rows.shape[0]
        ids, rows, slots = [self.next_token[decode_rows]], [decode_rows], [cache.lengths[decode_rows]]
        lengths = cache.lengths.clone()  # after this step
        lengths[decode_rows] += 1
        segments, start = [], n
        pending, self.pending = self.pending, {}
        seg_rows = sorted(pending)
        for row, slot in zip(seg_rows, cache.lengths[seg_rows].tolist() if seg_rows else []):
            chunk = torch.tensor(pending[row], dtype=torch.long, device=device)
            count = chunk.shape[0]
            segments.append(Segment.make(row, start, count, slot, cache.dtype, device))
            ids.append(chunk)
            rows.append(torch.full((count,), row, dtype=torch.long, device=device))
            slots.append(torch.arange(slot, slot + count, device=device))
            lengths[row] = slot + count
            start += count
        width = int(lengths.max())
        cache.reserve(width)
        cache.lengths = lengths
        mask, buckets = None, []
        if n:
            visible = torch.arange(width, device=device)[None, :] < lengths[:, None]
            mask = additive_mask(visible, cache.dtype)[:, None, None, :]
            buckets = self._buckets(lengths)
        ends = torch.tensor([seg.start + seg.count - 1 for seg in segments], dtype=torch.long, device=device)
        keep = torch.cat([torch.arange(n, device=device), ends])
        plan = StepPlan(cache, torch.cat(rows), torch.cat(slots), decode_rows, mask, segments, buckets)
        return torch.cat(ids), plan, keep

    def _buckets(self, lengths: torch.Tensor) -> list[tuple[int, int, int]]:
        """``(first, end, width)`` of each run of ``bucket_rows`` rows, width = its longest row."""
        size, count = self.bucket_rows, lengths.shape[0]
        if size <= 0 or count <= size:
            return []
        padded = torch.nn.functional.pad(lengths, (0, -count % size))
        widths = padded.reshape(-1, size).amax(dim=1).tolist()
        return [(first, min(first + size, count), width) for first, width in zip(range(0, count, size), widths)]

    def record(self, rows: torch.Tensor, tokens: torch.Tensor, logprobs: torch.Tensor) -> list[int]:
        """Append each row's sampled token to its turn; returns the rows whose turn ended
        (an end-of-turn token, or the turn's budget reached)."""
        position = self.turn_len[rows]
        self.turn_tokens[rows, position] = tokens
        self.turn_logprobs[rows, position] = logprobs.float()
        self.turn_len[rows] = position + 1
        self.next_token[rows] = tokens
        ended = torch.isin(tokens, self.eos) | (position + 1 >= self.budget[rows])
        self.decoding[rows] = ~ended
        return rows[ended].tolist()


def _compute_dtype(parameter: torch.Tensor) -> torch.dtype:
    """The dtype keys and values come out in: autocast's (e.g. bfloat16 on CUDA) or the weights'."""
    device_type = parameter.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return parameter.dtype
