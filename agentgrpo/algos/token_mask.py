"""Allowed-token masks: packed bits → booleans, and logits restricted to the allowed tokens.

A constrained sampler (``agentgrpo.agent.grammar``) draws each token from the policy's
distribution renormalised over the tokens a grammar allows. For the importance ratio to stay
exact, the trainer must score the same distribution: ``restrict_logits`` sets every
disallowed logit to the lowest finite float32, whose probability underflows to exactly 0
(unlike ``-inf``, it keeps ``p · logit`` finite in the entropy).

Masks are packed 32 tokens to an int32, bit ``t % 32`` of word ``t // 32`` for token ``t``
(llguidance's and xgrammar's layout).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

DISALLOWED_LOGIT = torch.finfo(torch.float32).min


def unpack_allowed(bits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """``(..., W)`` int32 packed masks → ``(..., vocab_size)`` bool, True where the token is allowed."""
    if bits.dtype != torch.int32:
        raise ValueError(f"packed masks must be int32, got {bits.dtype}")
    if bits.shape[-1] * 32 < vocab_size:
        raise ValueError(f"{bits.shape[-1]} mask words cover {bits.shape[-1] * 32} tokens, fewer than {vocab_size}")
    shifts = torch.arange(32, device=bits.device, dtype=torch.int32)
    flags = (bits.unsqueeze(-1) >> shifts) & 1  # arithmetic shift: the sign bit is read like any other
    return flags.reshape(*bits.shape[:-1], bits.shape[-1] * 32)[..., :vocab_size].bool()


def restrict_logits(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """``logits`` with every token outside ``allowed`` (same shape, bool) at ``DISALLOWED_LOGIT``."""
    return logits.masked_fill(~allowed, DISALLOWED_LOGIT)


@dataclass(frozen=True)
class TokenMasks:
    """Which tokens were allowed at each position of a (B, T) batch, stored once per distinct mask.

    index: (B, T) long, the row of ``table`` that held at each position (row 0 allows every
        token: unconstrained positions, prompts, padding); table: (M, W) int32 packed masks.
    """

    index: torch.Tensor
    table: torch.Tensor

    def allowed(self, positions: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """(N, vocab_size) bool for the True entries of ``positions`` ((B, T) bool), row-major."""
        return unpack_allowed(self.table[self.index[positions]], vocab_size)

    def select(self, rows: torch.Tensor, width: int) -> TokenMasks:
        """The masks of ``rows``, their first ``width`` positions (the table is shared)."""
        return TokenMasks(self.index[rows][:, :width], self.table)

    def to(self, device: torch.device | str) -> TokenMasks:
        return TokenMasks(self.index.to(device), self.table.to(device))
