"""Nucleus sampling keeps the most likely token even when top_p is below float32's range."""
from __future__ import annotations

import torch

from agentgrpo.rollout.sampling import sample_tokens


def test_a_vanishing_top_p_samples_the_most_likely_token():
    logits = torch.tensor([[0.0, 2.0, 1.0], [3.0, -1.0, 0.5]])
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):  # 5e-71 is 0 in float32: before the fix every token was dropped
        tokens, logprobs = sample_tokens(logits, temperature=1.0, top_p=5e-71, generator=generator)
        assert tokens.tolist() == [1, 0]
        assert torch.allclose(logprobs, torch.log_softmax(logits, dim=-1).max(dim=-1).values)
