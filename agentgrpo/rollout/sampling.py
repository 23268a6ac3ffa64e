"""Token sampling and chunked cached forwards for the rollout engine."""
from __future__ import annotations

import torch

from agentgrpo.rollout.cache import GrowableCache


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
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, sorted_idx, sorted_probs)
    # inverse-CDF sampling: one uniform per row (torch.multinomial is ~10x slower on CPU)
    cdf = probs.cumsum(dim=-1)
    uniform = torch.rand(cdf.shape[0], 1, generator=generator, device=cdf.device) * cdf[:, -1:]
    tokens = torch.searchsorted(cdf, uniform, right=True)[:, 0].clamp(max=cdf.shape[1] - 1)
    return tokens, logprobs_all.gather(-1, tokens[:, None])[:, 0]


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
