"""The decode attention's reads of each row's own cache slots, by cache dtype and key layout.

A decode step of ``agentgrpo eval`` is bound by reading the KV cache: every row's query
multiplies its own keys, ``(R, H, 1, D) @ (R, H, D, W)``, and the softmax weights multiply
its own values, ``(R, H, 1, W) @ (R, H, W, D)`` (``rollout/attention.py``). This times those
two products on eval-shaped tensors (128 rows, the tiny preset's 4 heads of 64, a shared
prefix of 300 slots and ``--own`` slots after it, sliced from a larger buffer as the cache
holds them) in float32, bfloat16 and float16, plus float32 with the keys stored transposed,
``(R, H, D, C)``, so the scores are a plain ``(1×D)·(D×W)`` product. A smaller cache only pays
where the CPU multiplies that dtype natively (AVX-512 BF16/FP16, AMX); on AVX2 it is
converted on the fly. ``sum`` reads the float32 keys once: the bandwidth floor.

Run: ``python benchmarks/decode_cache_layout.py [--threads 1] [--own 1200]``; about 15 s
(``--quick``: a smoke run).
Ends with BENCH lines (ratios > 1: slower than the float32 cache the engine keeps).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from functools import partial

import torch
from _common import bench, median, set_threads, timed

from agentgrpo.rollout.cache import ALIGN, GROWTH

ROWS, HEADS, HEAD_DIM, PREFIX = 128, 4, 64, 300


def per_call_ms(fn: Callable[..., object], *operands: torch.Tensor, reps: int) -> float:
    """Median milliseconds of ``fn(*operands)`` after one untimed call."""
    call = partial(fn, *operands)
    call()
    return median([timed(call)[1] for _ in range(reps)]) * 1e3


def scores(query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    return torch.matmul(query, keys.transpose(-1, -2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: as each ablate job runs)")
    parser.add_argument("--own", type=int, default=1200, help="slots of each row after the shared prefix")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="smoke size: 64 own slots, 2 timed calls")
    args = parser.parse_args()
    if args.quick:
        args.own, args.reps = 64, 2
    for name in ("threads", "own", "reps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    set_threads(args.threads)
    end = PREFIX + args.own
    capacity = math.ceil(end * GROWTH / ALIGN) * ALIGN  # a buffer that has grown past ``end``, as the cache holds it
    generator = torch.Generator().manual_seed(0)
    results: dict[str, tuple[float, float]] = {}
    for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16), ("float16", torch.float16)):
        keys = torch.randn(ROWS, HEADS, capacity, HEAD_DIM, generator=generator).to(dtype)
        values = torch.randn(ROWS, HEADS, capacity, HEAD_DIM, generator=generator).to(dtype)
        query = torch.randn(ROWS, HEADS, 1, HEAD_DIM, generator=generator).to(dtype)
        own_keys, own_values = keys[:, :, PREFIX:end], values[:, :, PREFIX:end]
        weights = torch.softmax(scores(query, own_keys).float(), -1).to(dtype)
        scores_ms = per_call_ms(scores, query, own_keys, reps=args.reps)
        values_ms = per_call_ms(torch.matmul, weights, own_values, reps=args.reps)
        results[name] = (scores_ms, values_ms)
        if dtype == torch.float32:
            floor_ms = per_call_ms(torch.sum, own_keys, reps=args.reps)
            keys_t = keys.transpose(-1, -2).contiguous()[:, :, :, PREFIX:end]
            transposed_ms = per_call_ms(torch.matmul, query, keys_t, reps=args.reps)
        del keys, values
    print(f"{ROWS} rows x {HEADS} heads x {args.own} own slots x D {HEAD_DIM}, {args.threads} thread(s); ms per call")
    for name, (scores_ms, values_ms) in results.items():
        print(f"  {name:9s} q.K^T {scores_ms:7.2f}   weights.V {values_ms:7.2f}")
    print(f"  float32 keys stored transposed: q.K^T {transposed_ms:.2f}; reading the keys once (sum) {floor_ms:.2f}")
    fp32 = sum(results["float32"])
    bench("decode_own_fp32_ms", fp32)
    bench("decode_own_bf16_vs_fp32", sum(results["bfloat16"]) / fp32)
    bench("decode_own_fp16_vs_fp32", sum(results["float16"]) / fp32)
    bench("decode_scores_transposed_keys_vs_fp32", transposed_ms / results["float32"][0])
    bench("decode_scores_vs_read_floor", results["float32"][0] / floor_ms)


if __name__ == "__main__":
    main()
