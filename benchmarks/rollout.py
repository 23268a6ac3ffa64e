"""Rollout throughput: the multi-turn engine against one plain batched ``generate`` call.

The engine runs a realistic GRPO batch (4 tasks × 8 episodes on the generated airline
world with the scripted user, temperature 1.0, up to 8 assistant turns of up to 64
tokens) and we count the tokens the policy sampled per second of wall time, environment,
user simulator, observation prefill and cache upkeep included. The ceiling is the same
model generating the same number of tokens in ONE ``model.generate`` call: batch = the
episodes, prompts = their first prompts (left-padded), the same temperature, and
``min_new_tokens = max_new_tokens`` = the engine's tokens per episode, so no row stops
early. The ratio says how much of the bare decoding speed survives multi-turn
book-keeping (target ≥ 0.7).

A warm-up pass of each (short) is not timed; each measurement is the median of
``--reps`` runs with fixed seeds (the same workload every time). With random weights
(the default policy) every turn runs to ``max_new_tokens`` and observations are short
user replies, the engine's easiest case; ``--policy`` with an SFT checkpoint gives tool
calls, long observations to prefill and turns of uneven length.

Run: ``python benchmarks/rollout.py [--policy DIR] [--quick]`` (about a minute on 2 quiet
cores; ``--quick`` is a small smoke-sized batch). Ends with BENCH lines.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from collections.abc import Callable

import torch
from _common import airline_specs, bench, chat_format, median, policy_dir, set_threads, timed, world
from transformers import GenerationConfig

from agentgrpo.agent.chat import ChatFormat
from agentgrpo.envs.airline.factory import EnvConfig
from agentgrpo.policy.hf import load_policy
from agentgrpo.rollout.engine import EpisodeSpec, RolloutConfig, RolloutEngine, RolloutStats


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", help="checkpoint dir (default: tiny preset, random weights)")
    parser.add_argument("--tasks", type=int, default=4, help="tasks in the batch")
    parser.add_argument("--group-size", type=int, default=8, help="episodes per task")
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tokens per assistant turn")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions (median reported)")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="2 tasks x 4, 3 turns x 32 tokens")
    args = parser.parse_args()
    if args.quick:
        args.tasks, args.group_size, args.max_turns, args.max_new_tokens, args.reps = 2, 4, 3, 32, 2
    return args


def first_prompts(chat: ChatFormat, specs: list[EpisodeSpec]) -> list[list[int]]:
    """Each episode's opening prompt, as the engine encodes it (resets the environments)."""
    return [chat.encode_prompt(chat.initial_messages(spec.env.reset())) for spec in specs]


def generate_once(model: torch.nn.Module, chat: ChatFormat, prompts: list[list[int]],
                  new_tokens: int, temperature: float, seed: int) -> int:
    """One batched, left-padded ``generate`` of exactly ``new_tokens`` per row; tokens made."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), chat.pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, prompt in enumerate(prompts):
        input_ids[row, width - len(prompt) :] = torch.tensor(prompt)
        attention_mask[row, width - len(prompt) :] = 1
    sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    config = GenerationConfig(
        max_new_tokens=new_tokens, min_new_tokens=new_tokens,  # eos never ends a row
        eos_token_id=chat.eos_token_ids, pad_token_id=chat.pad_token_id,
        **(sampling if temperature > 0 else {}),
    )
    torch.manual_seed(seed)
    with torch.inference_mode():
        output = model.generate(input_ids=input_ids, attention_mask=attention_mask,
                                generation_config=config)
    return (output.shape[1] - width) * output.shape[0]


def measure_engine(engine: RolloutEngine, make_specs: Callable[[], list[EpisodeSpec]], reps: int,
                   seed: int) -> tuple[float, int, RolloutStats]:
    """Median seconds and policy tokens of ``reps`` identical runs; the last run's stats."""
    short = dataclasses.replace(engine.config, max_turns=1, max_new_tokens=4)
    RolloutEngine(engine.model, engine.chat, short).run(make_specs(), seed=seed)  # warm-up
    times, tokens = [], []
    for rep in range(reps):
        _, seconds = timed(lambda: engine.run(make_specs(), seed=seed))
        stats = engine.last_stats
        print(f"  engine run {rep + 1}: {stats.policy_tokens} policy tokens in {seconds:.2f} s "
              f"({stats.policy_tokens / seconds:.0f} tok/s; {stats.rounds} rounds, "
              f"{stats.prefill_tokens} prefill tokens in {stats.prefill_forwards} forwards, "
              f"generate {stats.generate_seconds:.2f} s, "
              f"env {stats.env_seconds:.2f} s)")
        times.append(seconds)
        tokens.append(stats.policy_tokens)
    return median(times), round(median(tokens)), engine.last_stats


def measure_generate(model: torch.nn.Module, chat: ChatFormat, prompts: list[list[int]],
                     new_tokens: int, temperature: float, reps: int, seed: int) -> tuple[float, int]:
    """Median wall seconds of ``reps`` identical ``generate`` calls, and the tokens each made."""
    generate_once(model, chat, prompts, min(4, new_tokens), temperature, seed)  # warm-up
    times, tokens = [], 0
    for rep in range(reps):
        tokens, seconds = timed(
            lambda: generate_once(model, chat, prompts, new_tokens, temperature, seed))
        print(f"  generate run {rep + 1}: {tokens} tokens in {seconds:.2f} s "
              f"({tokens / seconds:.0f} tok/s)")
        times.append(seconds)
    return median(times), tokens


def main() -> None:
    args = parse_args()
    set_threads(args.threads)
    env_config = EnvConfig()
    bundle = world(env_config)
    tasks = bundle.tasks(["covered_seen", "uncovered_seen"])[: args.tasks]
    with tempfile.TemporaryDirectory(prefix="bench-rollout-") as workdir:
        checkpoint = policy_dir(bundle, workdir, args.policy, seed=args.seed)
        model, tokenizer = load_policy(checkpoint)
        chat = chat_format(bundle, tokenizer, checkpoint)
    rollout = RolloutConfig(max_turns=args.max_turns, max_new_tokens=args.max_new_tokens,
                            temperature=args.temperature)
    engine = RolloutEngine(model, chat, rollout)

    def make_specs() -> list[EpisodeSpec]:
        return airline_specs(bundle, env_config, tasks, args.group_size, args.max_turns, args.seed)

    episodes = len(tasks) * args.group_size
    print(f"engine: {len(tasks)} tasks x {args.group_size} episodes, max_turns {args.max_turns}, "
          f"max_new_tokens {args.max_new_tokens}, temperature {args.temperature}")
    engine_seconds, engine_tokens, stats = measure_engine(engine, make_specs, args.reps, args.seed)
    engine_rate = engine_tokens / engine_seconds

    per_episode = max(1, round(engine_tokens / episodes))
    prompts = first_prompts(chat, make_specs())
    lengths = [len(p) for p in prompts]
    print(f"generate: batch {episodes}, prompts of {min(lengths)}-{max(lengths)} tokens "
          f"(left-padded), exactly {per_episode} new tokens per row")
    generate_seconds, generate_tokens = measure_generate(
        model, chat, prompts, per_episode, args.temperature, args.reps, args.seed
    )
    generate_rate = generate_tokens / generate_seconds

    ratio = engine_rate / generate_rate
    print(f"engine:   {engine_tokens} tokens / {engine_seconds:.2f} s = {engine_rate:.1f} tok/s "
          f"({engine_tokens / episodes:.1f} tokens/episode, {stats.rounds} rounds)")
    print(f"generate: {generate_tokens} tokens / {generate_seconds:.2f} s = "
          f"{generate_rate:.1f} tok/s")
    print(f"ratio engine / generate: {ratio:.3f}")
    bench("rollout_tokens_per_s", engine_rate)
    bench("generate_tokens_per_s", generate_rate)
    bench("rollout_vs_generate_ratio", ratio, ">= 0.7")


if __name__ == "__main__":
    main()
