"""Token sampling for the rollout engine: temperature, nucleus, one seeded uniform per row;
and the restriction of each row's logits to what its turn grammar allows next."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from agentgrpo.algos import restrict_logits, unpack_allowed


def sample_tokens(
    logits: torch.Tensor,
    temperature: float,
    top_p: float,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row.

    logits: (B, V) next-token logits. temperature 0 means greedy.
    Returns tokens (B,) and their log-probs (B,) under the temperature-scaled
    distribution (before top-p truncation; the trainer recomputes log-probs anyway).
    """
    logits = logits.float()
    if temperature <= 0:
        tokens = logits.argmax(dim=-1)
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, tokens[:, None])[:, 0]
        return tokens, logprobs
    logprobs_all = torch.log_softmax(logits / temperature, dim=-1)
    probs = logprobs_all.exp()
    if top_p < 1.0:
        sorted_probs, sorted_idx = probs.sort(dim=-1, descending=True)
        # drop a token once the mass before it already reaches top_p (always keep the first)
        drop = (sorted_probs.cumsum(dim=-1) - sorted_probs) >= top_p
        drop[:, 0] = False  # a top_p below float32's range compares as 0 and would drop it too
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, sorted_idx, sorted_probs)
    # inverse-CDF sampling: one uniform per row (torch.multinomial is ~10x slower on CPU)
    cdf = probs.cumsum(dim=-1)
    uniform = torch.rand(cdf.shape[0], 1, generator=generator, device=cdf.device) * cdf[:, -1:]
    tokens = torch.searchsorted(cdf, uniform, right=True)[:, 0].clamp(max=cdf.shape[1] - 1)
    return tokens, logprobs_all.gather(-1, tokens[:, None])[:, 0]


def restrict_to_grammar(logits: torch.Tensor, grammar: Any, matchers: Sequence[Any]) -> torch.Tensor:
    """(B, V) logits with the tokens each row's matcher forbids next removed
    (``agentgrpo.agent.grammar.ToolCallGrammar``; row b is ``matchers[b]``'s), in float32."""
    masks = grammar.empty_masks(len(matchers))
    for row, matcher in enumerate(matchers):
        grammar.fill(matcher, masks, row)
    allowed = unpack_allowed(torch.from_numpy(masks).to(logits.device), logits.shape[-1])
    return restrict_logits(logits.float(), allowed)
