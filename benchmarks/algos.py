"""Cost of agentgrpo.algos relative to the model: is the math ever the bottleneck?

Times, on CPU with 2 threads, the full per-batch algos computation of a GRPO update —
advantages (Turn-Discount + LATA + per-turn PRM credit), PPO-clip policy loss, k3 KL,
LLDS, and the backward pass of their sum w.r.t. ``logp`` — at B=64, T=8192 on a
multi-turn response mask; then the forward+backward of the default tiny model on a few
smaller batches, scaled per token. The model's per-token cost is taken from short
sequences (its attention cost only grows with length), so the reported share of a
training step is an upper bound.

Run: ``python benchmarks/algos.py`` (about a minute). Ends with BENCH lines.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from agentgrpo.algos import ObjectiveSettings, get_advantage_estimator, grpo_objective, logprobs_from_logits

BATCH, HORIZON = 64, 8192
MODEL_SHAPES = [(4, 512), (8, 1024)]


def multi_turn_batch(batch: int, horizon: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """A synthetic rollout batch: assistant turns of 50–400 tokens between 20–200-token
    observations, responses of 25–100 % of the horizon, binary outcomes in groups of 8."""
    gen = torch.Generator().manual_seed(seed)
    mask = torch.zeros(batch, horizon)
    for b in range(batch):  # data construction only; the timed code has no loops
        end = int(horizon * (0.25 + 0.75 * torch.rand((), generator=gen).item()))
        t = 0
        while t < end:
            turn = int(torch.randint(50, 400, (), generator=gen))
            mask[b, t:min(t + turn, end)] = 1
            t += turn + int(torch.randint(20, 200, (), generator=gen))
    old = -3 * torch.rand(batch, horizon, generator=gen)
    return {
        "mask": mask,
        "scores": torch.randint(0, 2, (batch,), generator=gen).float(),
        "groups": torch.arange(batch) // 8,
        "turn_credit": 0.1 * torch.randn(batch, 64, generator=gen),
        "old_logp": old,
        "ref_logp": old - 0.05 * torch.rand(batch, horizon, generator=gen),
        "logp": old + 0.1 * torch.randn(batch, horizon, generator=gen),
    }


def algos_step(data: dict[str, torch.Tensor]) -> None:
    """One update's worth of algos math, forward and backward (w.r.t. logp)."""
    estimator = get_advantage_estimator("turn_discount_lata")
    advantages = estimator(data["scores"], data["groups"], data["mask"], norm_by_std=True,
                           turn_discount_alpha=1.05, turn_credit=data["turn_credit"],
                           turn_credit_coef=0.3)
    logp = data["logp"].clone().requires_grad_(True)
    loss, _ = grpo_objective(logp, data["old_logp"], advantages.token, data["mask"], seq_adv=advantages.sequence,
                             ref_logp=data["ref_logp"], **ObjectiveSettings(kl_coef=0.01, llds_coef=0.2).loss_kwargs())
    loss.backward()


def median_seconds(fn: Callable[[], None], reps: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def model_ms_per_mtok() -> float:
    """Forward+backward of the tiny preset per million tokens (the cheapest measured shape)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from agentgrpo.policy.presets import get_preset

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**get_preset("tiny").config))
    model.train()
    vocab = model.config.vocab_size
    costs = []
    for batch, length in MODEL_SHAPES:
        ids = torch.randint(0, vocab, (batch, length))

        def fwd_bwd(ids: torch.Tensor = ids) -> None:
            logits = model(input_ids=ids).logits[:, :-1]
            logprobs_from_logits(logits, ids[:, 1:]).mean().backward()
            model.zero_grad(set_to_none=True)

        seconds = median_seconds(fwd_bwd, reps=2)
        cost = seconds * 1e3 / (batch * length) * 1e6
        print(f"model fwd+bwd {batch}x{length}: {seconds * 1e3:.0f} ms  ({cost:.0f} ms/Mtok)")
        costs.append(cost)
    return min(costs)


def main() -> None:
    torch.set_num_threads(2)
    data = multi_turn_batch(BATCH, HORIZON)
    positions = BATCH * HORIZON
    active = int(data["mask"].sum())
    seconds = median_seconds(lambda: algos_step(data), reps=5)
    algos_cost = seconds * 1e3 / positions * 1e6
    print(f"algos fwd+bwd B={BATCH} T={HORIZON}: {seconds * 1e3:.0f} ms for {positions} token "
          f"positions ({active} active)  ({algos_cost:.0f} ms/Mtok, "
          f"{seconds * 1e3 / active * 1e6:.0f} ms per M active tokens)")
    model_cost = model_ms_per_mtok()
    share = algos_cost / (algos_cost + model_cost)
    print(f"BENCH algos_ms_per_mtok {algos_cost:.1f} target info")
    print(f"BENCH model_fwd_bwd_ms_per_mtok {model_cost:.1f} target info")
    print(f"BENCH algos_share_of_step {share:.4f} target < 0.02")


if __name__ == "__main__":
    main()
