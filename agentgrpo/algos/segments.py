"""Segments of a response mask: the maximal runs of ``mask == 1``.

In a multi-turn trajectory the response mask is 1 on the tokens the policy generated
and 0 on prompt, tool observations, user messages and padding, so each maximal run of
ones is one assistant turn — an *action* in the LLDS paper's words. These helpers
number the runs per row (0..J-1, left to right), count them, and sum a per-token value
over each run, all vectorised (cumulative sums and one flat ``scatter_add``), with no
host synchronisation.
"""
from __future__ import annotations

import torch


def segment_starts(mask: torch.Tensor) -> torch.Tensor:
    """Bool ``[B, T]``: True where a run of ``mask == 1`` begins.

    A token starts a run when it is active and the previous token (if any) is not.
    """
    active = mask.bool()
    previous = torch.zeros_like(active)
    previous[..., 1:] = active[..., :-1]
    return active & ~previous


def segment_ids(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Number the maximal runs of ``mask == 1`` in each row.

    Args:
        mask: ``[B, T]`` response mask (bool, int or float; non-zero = active).

    Returns:
        ids: ``[B, T]`` long, the run (turn / action) index 0..J_b-1 of each active
            token and -1 on inactive tokens.
        counts: ``[B]`` long, J_b = the number of runs in row b.

    Example: mask ``[0, 1, 1, 0, 1]`` gives ids ``[-1, 0, 0, -1, 1]`` and count 2.
    """
    active = mask.bool()
    running = running_count(segment_starts(mask))  # [B, T] runs started so far
    ids = torch.where(active, running - 1, torch.full_like(running, -1))
    counts = running[..., -1] if running.shape[-1] > 0 else running.new_zeros(running.shape[:-1])
    return ids, counts


def running_count(flags: torch.Tensor) -> torch.Tensor:
    """Inclusive running count of True along the last dim, as long ``[B, T]``.

    Summed in float32 — exact for rows shorter than 2^24 tokens, and on CPU about ten
    times faster than an int64 cumsum.
    """
    return flags.to(torch.float32).cumsum(dim=-1).long()


def max_segments(num_tokens: int) -> int:
    """An upper bound on the runs a row of ``num_tokens`` tokens can hold (runs need gaps)."""
    return (num_tokens + 1) // 2


def segment_sum(values: torch.Tensor, ids: torch.Tensor, num_segments: int) -> torch.Tensor:
    """Sum ``values`` over each run: ``out[b, j] = Σ_{t: ids[b,t]=j} values[b, t]``.

    Args:
        values: ``[B, T]`` per-token values (inactive tokens are ignored).
        ids: ``[B, T]`` run ids from :func:`segment_ids` (-1 = inactive).
        num_segments: J, the width of the output; runs with id ≥ J are dropped.
            :func:`max_segments` ``(T)`` is always enough and needs no host sync.

    Returns:
        ``[B, J]`` sums, in ``values``' dtype (zero where row b has no run j).
    """
    batch = values.shape[0]
    flat_index = _flat_segment_index(ids, num_segments)
    out = values.new_zeros(batch * num_segments + 1)  # the last slot collects inactive tokens
    out.scatter_add_(0, flat_index.reshape(-1), values.reshape(-1))
    return out[:-1].reshape(batch, num_segments)


def gather_segments(per_segment: torch.Tensor, ids: torch.Tensor,
                    fill: float = 0.0) -> torch.Tensor:
    """Broadcast ``[B, J]`` per-run values to the tokens: ``out[b,t] = per_segment[b, ids[b,t]]``.

    Inactive tokens (id -1) and runs beyond J get ``fill``.
    """
    num_segments = per_segment.shape[-1]
    if num_segments == 0:
        return torch.full(ids.shape, fill, dtype=per_segment.dtype, device=per_segment.device)
    valid = (ids >= 0) & (ids < num_segments)
    safe_ids = torch.where(valid, ids, torch.zeros_like(ids))
    gathered = per_segment.gather(-1, safe_ids)
    return torch.where(valid, gathered, torch.full_like(gathered, fill))


def _flat_segment_index(ids: torch.Tensor, num_segments: int) -> torch.Tensor:
    """Index into a flat ``[B*J + 1]`` buffer; inactive or out-of-range tokens go to the end."""
    batch = ids.shape[0]
    row_offset = torch.arange(batch, device=ids.device).unsqueeze(-1) * num_segments
    valid = (ids >= 0) & (ids < num_segments)
    return torch.where(valid, row_offset + ids, torch.full_like(ids, batch * num_segments))
