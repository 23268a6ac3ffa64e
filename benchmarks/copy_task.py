"""How long does a model built from a config take to learn in-context copying?

Trains a preset from scratch on the copy warm-up's task alone (``copy_warmup_batch``: a random
segment of ``--length`` tokens hidden at a random place among ``--context`` random tokens of a
``--pool``-token alphabet, then the segment again; ``copy_warmup_loss`` scores the repeat after
its first token) and prints the loss averaged over every 50 steps. Chance is ln(pool); a model
that copies by content is near 0. Small transformers sit on a plateau near chance before they
learn this, then drop suddenly; this measures how long the plateau is for a preset and a
learning rate (constant, AdamW, weight decay 0.01, gradient clip 1.0, 32 rows per step).

``--task slot`` trains SFT's other copy task instead (``slot_recall_batch``): the airline's four
id kinds (48, 4, 12 and 16 slots, each slot one token) mentioned among ``--context`` random
tokens, and 8 queries a row (three random 4-token query contexts per kind), each answered by the
latest slot of its kind; chance is the mean of ln(slots) over the kinds, about 2.6.

    python benchmarks/copy_task.py --lr 1e-3 --steps 1000
    python benchmarks/copy_task.py --task slot --context 120 --steps 400
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentgrpo.policy.presets import PRESETS  # noqa: E402
from agentgrpo.train.copy_check import (  # noqa: E402
    SlotRecallTokens,
    copy_warmup_batch,
    copy_warmup_loss,
    labelled_nll,
    slot_recall_batch,
)
from benchmarks._common import bench  # noqa: E402

AIRLINE_SLOTS = (48, 4, 12, 16)
"""Slots per id kind of the airline's delexicaliser (flights, users, payment methods, reservations)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="segment", choices=["segment", "slot"])
    parser.add_argument("--preset", default="tiny", choices=[n for n, p in PRESETS.items() if p.kind == "built"])
    parser.add_argument("--context", type=int, default=32)
    parser.add_argument("--length", type=int, default=8)
    parser.add_argument("--pool", type=int, default=140, help="tokens the segments are drawn from")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--stop-below", type=float, default=0.3, help="stop once the 50-step mean is below this")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.length < 1 or (args.context and args.context < args.length):
        parser.error(f"--context ({args.context}) must hold the segment (--length {args.length})")
    if args.task == "slot" and args.pool < 12 * len(AIRLINE_SLOTS):
        parser.error(f"--pool ({args.pool}) must hold the slot task's query contexts (>= {12 * len(AIRLINE_SLOTS)})")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    config = dict(PRESETS[args.preset].config)
    model = LlamaForCausalLM(LlamaConfig(**config))
    generator = torch.Generator().manual_seed(args.seed)
    vocab = config["vocab_size"]
    drawn = torch.randperm(vocab - 10, generator=generator).add(10).tolist()  # clear of special ids
    pool = drawn[:args.pool]
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    start, losses, window = time.perf_counter(), [], float("nan")
    if args.task == "slot":
        slots, rest = [], drawn[args.pool:]
        for count in AIRLINE_SLOTS:
            slots.append(rest[:count])
            rest = rest[count:]
        queries = [[pool[i:i + 4] for i in range(4 * (3 * k), 4 * (3 * k + 3), 4)] for k in range(len(slots))]
        tokens = SlotRecallTokens(filler=pool, slots=slots, queries=queries)
        chance = sum(math.log(count) for count in AIRLINE_SLOTS) / len(AIRLINE_SLOTS)
        print(f"{args.preset}: slot recall, context {args.context}, kinds of {AIRLINE_SLOTS} slots, pool {args.pool} "
              f"(chance about {chance:.3f}), lr {args.lr}", flush=True)
    else:
        chance = math.log(args.pool)
        print(f"{args.preset}: context {args.context}, segment {args.length}, pool {args.pool} "
              f"(chance {chance:.3f}), lr {args.lr}", flush=True)
    for step in range(1, args.steps + 1):
        if args.task == "slot":
            sequences, labelled = slot_recall_batch(tokens, args.context, 8, 32, generator, 1)
            loss = labelled_nll(model, sequences, labelled)
        else:
            batch = copy_warmup_batch(pool, args.length, 32, generator, 1, context=args.context)
            loss = copy_warmup_loss(model, batch, args.length)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if step % 50 == 0:
            window = sum(losses[-50:]) / 50
            print(f"step {step}: loss {window:.3f} ({time.perf_counter() - start:.0f} s)", flush=True)
            if window < args.stop_below:
                break
    bench("copy_task_final_loss", window, "info")
    bench("copy_task_chance", chance, "info")
    bench("copy_task_steps", len(losses), "info")


if __name__ == "__main__":
    main()
