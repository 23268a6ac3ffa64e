"""Shared setup of the throughput benchmarks (``rollout.py``, ``train_step.py``).

Both need the same things: torch pinned to a thread count, the generated airline
world, a policy (the tiny preset built on that world's text, or a checkpoint such as an
SFT run's ``final``), its ``ChatFormat``, GRPO-style episode specs with the scripted
user, and a few timing / reporting helpers.
"""

from __future__ import annotations

import os
import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch

from agentgrpo.agent.chat import ChatFormat
from agentgrpo.envs.airline.factory import EnvBundle, EnvConfig, build_env, make_env
from agentgrpo.envs.types import Task
from agentgrpo.policy.hf import build_policy, read_agent_config
from agentgrpo.policy.tokenizer import domain_corpus
from agentgrpo.rollout.engine import EpisodeSpec

T = TypeVar("T")


def set_threads(threads: int) -> None:
    """Pin torch's intra-op threads and say how busy the machine is.

    On a shared 2-core machine a second busy process makes a 2-thread torch run tens of
    times slower (each parallel region waits for a descheduled thread), so the load
    average is printed next to the numbers it explains.
    """
    torch.set_num_threads(threads)
    load = os.getloadavg()[0]
    cores = os.cpu_count() or 1
    print(f"torch threads: {threads}; cpu cores: {cores}; load average (1 min): {load:.2f}")
    if load > 1.0:  # also counts a run that just ended, so this is a hint, not a verdict
        print("warning: the machine looks busy; throughput numbers may be low and noisy")


def world(env_config: EnvConfig | None = None) -> EnvBundle:
    """The generated airline world and its splits (the offline default)."""
    return build_env(env_config or EnvConfig())


def policy_dir(bundle: EnvBundle, workdir: str | Path, init: str | None = None,
               seed: int = 0) -> Path:
    """``init`` if given (a checkpoint directory), else the tiny preset built into ``workdir``.

    The tiny preset gets random weights, a tokenizer trained on the world's text and the
    compact system prompt, as an SFT run of a built preset would.
    """
    if init is not None:
        return Path(init)
    target = Path(workdir) / "tiny"
    build_policy("tiny", domain_corpus(bundle.domain), target, seed=seed,
                 agent_config={"prompt_style": "compact"})
    return target


def chat_format(bundle: EnvBundle, tokenizer: Any, checkpoint: str | Path) -> ChatFormat:
    """The chat format the checkpoint was trained with (its recorded prompt style)."""
    style = read_agent_config(checkpoint)["prompt_style"]
    domain = bundle.domain
    return ChatFormat(tokenizer, domain.tool_schemas(), domain.policy, prompt_style=style)


def airline_specs(bundle: EnvBundle, env_config: EnvConfig, tasks: list[Task], group_size: int,
                  max_turns: int, seed: int = 0) -> list[EpisodeSpec]:
    """``group_size`` scripted-user episodes per task (fresh environments, fixed user seeds)."""
    specs = []
    for task_index, task in enumerate(tasks):
        for sample in range(group_size):
            user_seed = seed * 100_003 + task_index * 1_000 + sample
            env = make_env(bundle, task, env_config, user_seed=user_seed, max_steps=max_turns)
            specs.append(EpisodeSpec(env, task.task_id, f"{task_index}:{task.task_id}", sample))
    return specs


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    """``(fn(), wall seconds)``."""
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench(name: str, value: float, target: str = "info") -> None:
    """One ``BENCH <name> <value> target <op> <value>`` line (``target info``: no target)."""
    text = f"{value:.1f}" if abs(value) >= 100 else f"{value:.4g}"
    print(f"BENCH {name} {text} target {target}")
