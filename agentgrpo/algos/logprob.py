"""Token log-probabilities and entropies from logits, lean on memory.

``logprobs_from_logits`` computes ``logits[label] − logsumexp(logits)`` without
materialising a log-softmax over the vocabulary, in float32 whatever the logits' dtype,
optionally over chunks of tokens. Its backward is written by hand: it keeps only the
logits (in their own dtype) and the ``[B, T]`` logsumexp, and rebuilds the softmax chunk
by chunk, so a bfloat16 ``[B, T, V]`` never has a float32 twin kept alive for autograd.
"""
from __future__ import annotations

import torch


def _chunks(num_rows: int, chunk_size: int | None):
    step = num_rows if not chunk_size or chunk_size <= 0 else chunk_size
    for start in range(0, num_rows, max(step, 1)):
        yield slice(start, min(start + step, num_rows))


class _TokenLogProb(torch.autograd.Function):
    """``out[n] = z[n, y_n] − logsumexp(z[n])`` over flattened rows ``z[N, V]``, ``y[N]``."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor, chunk_size: int | None):
        out = logits.new_empty(logits.shape[0], dtype=torch.float32)
        lse = torch.empty_like(out)
        for rows in _chunks(logits.shape[0], chunk_size):
            block = logits[rows].float()
            lse[rows] = torch.logsumexp(block, dim=-1)
            out[rows] = block.gather(-1, labels[rows].unsqueeze(-1)).squeeze(-1) - lse[rows]
        ctx.save_for_backward(logits, labels, lse)
        ctx.chunk_size = chunk_size
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: torch.Tensor):
        logits, labels, lse = ctx.saved_tensors
        grad = torch.empty_like(logits)
        for rows in _chunks(logits.shape[0], ctx.chunk_size):
            g = grad_out[rows].float().unsqueeze(-1)
            # d/dz (z_y − lse(z)) = onehot(y) − softmax(z)
            block = -torch.exp(logits[rows].float() - lse[rows].unsqueeze(-1)) * g
            block.scatter_add_(-1, labels[rows].unsqueeze(-1), g)
            grad[rows] = block.to(grad.dtype)
        return grad, None, None


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor, *,
                         chunk_size: int | None = None) -> torch.Tensor:
    """Log-probability of each label: ``[B, T, V]`` logits, ``[B, T]`` labels → ``[B, T]`` float32.

    ``chunk_size`` bounds the number of tokens whose float32 vocabulary row exists at
    once (None: all at once). Differentiable w.r.t. ``logits`` (first order).
    """
    if logits.shape[:-1] != labels.shape:
        raise ValueError(f"logits {tuple(logits.shape)} do not match labels {tuple(labels.shape)}")
    flat_logits = logits.reshape(-1, logits.shape[-1])
    flat_labels = labels.reshape(-1).long()
    # outside autograd the saved tensors are dropped with the call: no extra memory
    flat = _TokenLogProb.apply(flat_logits, flat_labels, chunk_size)
    return flat.reshape(labels.shape)


def entropy_from_logits(logits: torch.Tensor, *, chunk_size: int | None = None) -> torch.Tensor:
    """Entropy of the softmax of each row: ``[B, T, V]`` → ``[B, T]`` float32.

    ``H = logsumexp(z) − Σ_v softmax(z)_v · z_v``, computed per chunk of ``chunk_size``
    tokens in float32 (differentiable through autograd).
    """
    flat = logits.reshape(-1, logits.shape[-1])
    pieces = []
    for rows in _chunks(flat.shape[0], chunk_size):
        block = flat[rows].float()
        lse = torch.logsumexp(block, dim=-1)
        pieces.append(lse - (torch.softmax(block, dim=-1) * block).sum(dim=-1))
    out = torch.cat(pieces) if pieces else flat.new_zeros(0, dtype=torch.float32)
    return out.reshape(logits.shape[:-1])
