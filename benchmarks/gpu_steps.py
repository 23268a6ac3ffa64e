"""SFT and GRPO steps per second on one GPU, with the largest model that can be brought there.

The prepared device check of docs/results/gpu.md. It runs the real jobs (``train_sft``,
``train_grpo``: the same code as ``agentgrpo sft`` / ``agentgrpo train``) for a few steps
and reads their ``metrics.jsonl`` (``perf/step_s`` of every step but the first, which
pays for warm-up and compilation):

1. Model: the ``--model`` candidates in order, largest first, until one runs an SFT step
   without running out of memory (the others are reported as skipped, with why). A
   candidate is a checkpoint directory, a Hub id found in the local Hugging Face cache
   (``HF_HUB_OFFLINE=1`` is set unless ``--allow-download``), a preset, or
   ``shape:7b`` / ``shape:1.5b`` / ``shape:0.5b``: a model with Qwen2.5-Instruct's
   dimensions (Llama blocks with q/k/v bias, our domain tokenizer, random weights) built
   on the device, for machines no checkpoint can reach. Default on CUDA: the three Qwen2.5
   Instruct ids, then the three shapes.
2. SFT: oracle demonstrations on the generated airline world, full prompt, batch 4 of
   micro-batch 1, bfloat16 weights and gradient checkpointing on CUDA (``--lora-rank``
   for adapters instead). BENCH ``gpu_sft_steps_per_s``, ``gpu_sft_tokens_per_s``.
3. GRPO: ``experiment=joint`` from the same model, 4 tasks × 8 episodes, 8 turns of up to
   256 tokens, one optimizer step per mini-batch of 16, β_kl 0.01 with a reference
   model. BENCH ``gpu_grpo_steps_per_s``, ``gpu_grpo_rollout_share``, peak memory.

On a machine without CUDA it runs the same path with the tiny preset (``--quick`` makes
everything smoke-sized: the CPU test of this script). Run from the repository root:
``python benchmarks/gpu_steps.py [--model ID ...] [--steps 4] [--lora-rank 0] [--quick]``.
Ends with BENCH lines and, with ``--markdown FILE``, a results section to paste.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from _common import bench, set_threads

from agentgrpo.config import load_config
from agentgrpo.tracking import read_metrics
from agentgrpo.train.grpo import train_grpo
from agentgrpo.train.grpo_config import GRPOConfig
from agentgrpo.train.sft import train_sft
from agentgrpo.train.sft_config import SFTConfig

GPU_MODELS = ["Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct",
              "shape:7b", "shape:1.5b", "shape:0.5b"]
SHAPES = {  # Qwen2.5-{7B,1.5B,0.5B}-Instruct's config.json dimensions; "toy" for the CPU test
    "7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
               num_key_value_heads=4, tie_word_embeddings=False),
    "1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, tie_word_embeddings=True),
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, tie_word_embeddings=True),
    "toy": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, tie_word_embeddings=True),
}
SMALL_ENV = ["env.n_tasks=12", "env.splits.covered_seen=4", "env.splits.uncovered_seen=4", "env.splits.unseen=4"]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", help="candidate model (Hub id, directory, preset), largest "
                        "first; repeatable (default: Qwen2.5 7B/1.5B/0.5B on CUDA, the tiny preset elsewhere)")
    parser.add_argument("--device", default="auto", help="policy.device (default auto)")
    parser.add_argument("--steps", type=int, default=4, help="steps of each job (the first is warm-up)")
    parser.add_argument("--lora-rank", type=int, default=0, help="LoRA rank (0: full fine-tuning)")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (CPU)")
    parser.add_argument("--quick", action="store_true", help="smoke size (the CPU test)")
    parser.add_argument("--workdir", help="where runs go (default: a temporary directory, removed)")
    parser.add_argument("--markdown", help="write a results section to this file")
    parser.add_argument("--allow-download", action="store_true", help="let Hub ids download (default: cache only)")
    return parser.parse_args()


def build_shape(name: str, out: Path, device: str) -> Path:
    """A random-init Llama model with ``SHAPES[name]``'s dimensions and our domain tokenizer, saved to ``out``."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    from agentgrpo.envs.config import EnvConfig
    from agentgrpo.envs.registry import build_env
    from agentgrpo.policy.device import resolve_device
    from agentgrpo.policy.hf import save_policy
    from agentgrpo.policy.tokenizer import END_OF_TEXT, IM_END, domain_corpus, train_tokenizer

    tokenizer = train_tokenizer(domain_corpus(build_env(EnvConfig()).domain), 4096, model_max_length=32768)
    bos, eos = tokenizer.convert_tokens_to_ids(END_OF_TEXT), tokenizer.convert_tokens_to_ids(IM_END)
    config = LlamaConfig(**SHAPES[name], vocab_size=len(tokenizer), max_position_embeddings=32768,
                         rope_theta=1_000_000.0, attention_bias=True, bos_token_id=bos, eos_token_id=eos,
                         pad_token_id=tokenizer.pad_token_id)
    target = resolve_device(device)
    with torch.device(target):  # initialised where it runs: seconds for 7B on a GPU
        model = LlamaForCausalLM(config)
    if target.type == "cuda":
        model = model.to(torch.bfloat16)
    model.generation_config = GenerationConfig(bos_token_id=bos, eos_token_id=eos, pad_token_id=tokenizer.pad_token_id)
    save_policy(model, tokenizer, out, {"prompt_style": "full"})  # stands in for a pretrained model
    del model
    if target.type == "cuda":
        torch.cuda.empty_cache()
    return out


def policy_overrides(model: str, args: argparse.Namespace, cuda: bool) -> list[str]:
    settings = [f"policy.init={model}", f"policy.device={args.device}", f"policy.lora.rank={args.lora_rank}"]
    if cuda:
        settings += ["policy.gradient_checkpointing=true"]
        if not args.lora_rank:  # full fine-tuning of 7B only fits with bf16 weights and optimizer state
            settings += ["policy.dtype=bfloat16"]
    return settings


def run_sft(model: str, args: argparse.Namespace, cuda: bool, run_dir: Path) -> dict:
    steps = max(2, args.steps)
    tasks = 4 if args.quick else min(16, 4 * steps)  # 4 demonstrations per optimizer step
    overrides = [*policy_overrides(model, args, cuda), f"run_dir={run_dir}", "progress=false",
                 "trainer.epochs=1", f"data.demos_per_task={-(-4 * steps // tasks)}",
                 f"trainer.lr={'1.0e-5' if cuda else '1.0e-3'}", "trainer.batch_size=4",
                 f"trainer.micro_batch_size={1 if cuda else 2}", *(SMALL_ENV if args.quick else []),
                 f"env.splits.covered_seen={tasks}"]
    config = load_config(SFTConfig, overrides, defaults="sft.yaml")
    final = train_sft(config)
    records = read_metrics(run_dir / "metrics.jsonl")
    timed = records[1:] or records
    step_s = statistics.median(r["perf/step_s"] for r in timed)
    return {"final": final, "steps": len(records), "step_s": step_s,
            "tokens_per_s": statistics.median(r["perf/tokens_per_s"] for r in timed)}


def run_grpo(init: str, args: argparse.Namespace, cuda: bool, run_dir: Path) -> dict:
    size = (["trainer.tasks_per_step=2", "trainer.group_size=2", "trainer.mini_batch_size=4",
             "trainer.micro_batch_size=2", "rollout.max_turns=2", "rollout.max_new_tokens=8",
             "rollout.max_total_tokens=1200", *SMALL_ENV] if args.quick else
            ["trainer.tasks_per_step=4", "trainer.group_size=8", "trainer.mini_batch_size=16",
             f"trainer.micro_batch_size={2 if cuda else 8}", "rollout.max_turns=8", "rollout.max_new_tokens=256",
             "rollout.max_total_tokens=8192"])
    overrides = ["experiment=joint", *policy_overrides(init, args, cuda), f"run_dir={run_dir}",
                 f"trainer.steps={max(2, args.steps)}", "trainer.save_every=0", "logging.progress=false",
                 f"trainer.lr={'1.0e-6' if cuda else '5.0e-5'}", *size]
    config = load_config(GRPOConfig, overrides, defaults="grpo.yaml")
    train_grpo(config)
    records = read_metrics(run_dir / "metrics.jsonl")
    timed = records[1:] or records
    step_s = statistics.median(r["perf/step_s"] for r in timed)
    rollout_share = statistics.median(r["perf/rollout_s"] / r["perf/step_s"] for r in timed)
    return {"steps": len(records), "step_s": step_s, "rollout_share": rollout_share,
            "episodes": f"{config.trainer.tasks_per_step}×{config.trainer.group_size}",
            "response_tokens": statistics.median(r["rollout/response_tokens_mean"] for r in timed)}


def peak_memory_gib() -> float:
    return torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else float("nan")


def first_model_that_fits(models: list[str], args: argparse.Namespace, cuda: bool, work: Path) -> tuple[str, dict]:
    """SFT with each candidate in turn; the first one that runs wins (the others: why not)."""
    for model in models:
        run_dir = work / f"sft-{model.replace('/', '--').replace(':', '-')}"
        try:
            start = time.perf_counter()
            source = str(build_shape(model[6:], work / model[6:], args.device)) if model.startswith("shape:") \
                else model
            result = run_sft(source, args, cuda, run_dir)
            result["source"] = source
            print(f"model {model}: SFT ran ({time.perf_counter() - start:.0f} s)", flush=True)
            return model, result
        except torch.cuda.OutOfMemoryError as e:
            print(f"model {model}: skipped, out of GPU memory ({str(e).splitlines()[0]})", flush=True)
        except Exception as e:  # not cached offline, no peft, ...: say why, try the next one
            print(f"model {model}: skipped, {type(e).__name__}: {' '.join(str(e).split())[:300]}", flush=True)
        shutil.rmtree(run_dir, ignore_errors=True)
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
    raise SystemExit("no candidate model could run an SFT step; pass --model")


def main() -> int:
    args = parse_args()
    if not args.allow_download:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a Hub id is used only if it is cached here
    set_threads(args.threads)
    cuda = torch.cuda.is_available() and (args.device in ("auto", "cuda") or args.device.startswith("cuda:"))
    device_name = torch.cuda.get_device_name() if cuda else "cpu"
    models = args.model or (GPU_MODELS if cuda else ["tiny"])
    print(f"device: {device_name}; candidates: {models}; lora rank {args.lora_rank}", flush=True)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="gpu_steps-"))
    try:
        model, sft = first_model_that_fits(models, args, cuda, work)
        sft_peak = peak_memory_gib()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        grpo_init = str(sft["final"]) if model in ("tiny", "small") else sft["source"]  # presets: the SFT result
        grpo = run_grpo(grpo_init, args, cuda, work / "grpo")
        grpo_peak = peak_memory_gib()
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"model": model, "sft": {k: v for k, v in sft.items() if k not in ("final", "source")},
                      "grpo": grpo,
                      "peak_gib": {"sft": sft_peak, "grpo": grpo_peak}}, default=str))
    if args.markdown:
        write_markdown(Path(args.markdown), model, device_name, args, sft, grpo, sft_peak, grpo_peak)
    bench("gpu_sft_steps_per_s", 1 / sft["step_s"])
    bench("gpu_sft_tokens_per_s", sft["tokens_per_s"])
    bench("gpu_grpo_steps_per_s", 1 / grpo["step_s"])
    bench("gpu_grpo_rollout_share", grpo["rollout_share"])
    return 0


def write_markdown(path: Path, model: str, device: str, args: argparse.Namespace, sft: dict, grpo: dict,
                   sft_peak: float, grpo_peak: float) -> None:
    lora = f"LoRA rank {args.lora_rank}" if args.lora_rank else "full fine-tuning"
    path.write_text(
        f"### {model} on {device} ({lora})\n\n"
        f"`python benchmarks/gpu_steps.py {' '.join(sys.argv[1:])}`\n\n"
        "| job | steps/s | s/step | other | peak GPU memory |\n|---|---|---|---|---|\n"
        f"| SFT (batch 4) | {1 / sft['step_s']:.3f} | {sft['step_s']:.2f} | {sft['tokens_per_s']:.0f} tokens/s "
        f"| {sft_peak:.1f} GiB |\n"
        f"| GRPO (joint, {grpo['episodes']} episodes) | {1 / grpo['step_s']:.4f} | {grpo['step_s']:.1f} | rollout "
        f"{grpo['rollout_share']:.0%} of the step | {grpo_peak:.1f} GiB |\n")


if __name__ == "__main__":
    sys.exit(main())
