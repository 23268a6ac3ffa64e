"""Shared setup of the throughput benchmarks (``rollout.py``, ``train_step.py``).

Both need the same things: torch pinned to a thread count, the generated airline
world, a policy, its ``ChatFormat``, GRPO-style episode specs with the scripted user,
and a few timing / reporting helpers. The default policy is a *trained* one: a short SFT
run of the tiny preset (``BENCH_SFT``, about two minutes on 2 cores, made once and kept
under ``runs/bench/``), because a policy with random weights runs every turn to
``max_new_tokens`` and never calls a tool, the easiest case for a multi-turn engine.
``--policy random`` gives that random-weight preset, ``--policy DIR`` any checkpoint.
"""

from __future__ import annotations

import hashlib
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch

from agentgrpo.agent.chat import ChatFormat
from agentgrpo.envs.config import EnvConfig
from agentgrpo.envs.registry import EnvBundle, build_env, make_env
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


REPO = Path(__file__).resolve().parents[1]

BENCH_SFT = ["data.demos_per_task=4", "trainer.epochs=6", "trainer.batch_size=2", "trainer.micro_batch_size=2"]
"""The benchmarks' default policy: ``agentgrpo sft`` (tiny preset, sft.yaml) with these overrides."""

BENCH_SFT_QUICK = ["data.demos_per_task=1", "trainer.epochs=1", "env.n_tasks=12",
                   "env.splits.covered_seen=4", "env.splits.uncovered_seen=4", "env.splits.unseen=4"]
"""``--quick``: a few SFT steps (a policy that is barely trained: for smoke runs only)."""

GRPO_QUICK = ["trainer.tasks_per_step=2", "trainer.group_size=4", "trainer.mini_batch_size=4",
              "trainer.micro_batch_size=2", "rollout.max_turns=6", "rollout.max_new_tokens=64",
              "env.train_worlds=2", "trainer.dynamic_sampling=false"]
"""``--quick`` of the benchmarks that run an ablation preset's GRPO stage: a small batch of
short episodes (a smoke run)."""


def policy_dir(bundle: EnvBundle, workdir: str | Path, init: str | None = None, seed: int = 0,
               cache: str | Path | None = None, quick: bool = False) -> Path:
    """The benchmark's policy: ``init`` if it is a checkpoint directory; the tiny preset with
    random weights built into ``workdir`` if it is ``random``; else (``None``) the SFT policy
    trained by ``trained_policy`` (kept in ``cache``, default ``runs/bench``).

    The random preset gets a tokenizer trained on the world's text and the compact system
    prompt, as an SFT run of a built preset would.
    """
    if init is None:
        return trained_policy(Path(cache).resolve() if cache else REPO / "runs" / "bench", seed, quick)
    if init != "random":
        return Path(init)
    target = Path(workdir) / "tiny"
    build_policy("tiny", domain_corpus(bundle.domain), target, seed=seed,
                 agent_config={"prompt_style": "compact"})
    return target


def trained_policy(cache: Path, seed: int = 0, quick: bool = False) -> Path:
    """A short SFT run's final checkpoint, trained once per settings and kept under ``cache``.

    Runs ``python -m agentgrpo.cli sft`` in a child process (so its memory does not count in
    the benchmark's peak RSS) into a scratch directory that is renamed into place when done.
    """
    overrides = [*(BENCH_SFT_QUICK if quick else BENCH_SFT), f"seed={seed}"]
    key = hashlib.sha256(" ".join(overrides).encode()).hexdigest()[:10]
    target = cache / f"sft-{key}"
    final = target / "final"
    if (final / "agentgrpo.json").is_file():
        print(f"policy: {final} (SFT {' '.join(overrides)}; trained earlier)")
        return final
    scratch = cache / f"sft-{key}.{os.getpid()}.tmp"
    print(f"policy: training it once: agentgrpo sft {' '.join(overrides)} -> {target}", flush=True)
    start = time.perf_counter()
    command = [sys.executable, "-m", "agentgrpo.cli", "sft", *overrides, f"run_dir={scratch}", "progress=false"]
    subprocess.run(command, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    try:
        scratch.rename(target)
    except OSError:  # another run trained the same policy meanwhile: use theirs
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"policy: trained in {time.perf_counter() - start:.0f} s")
    return final


def add_policy_arguments(parser: Any) -> None:
    """``--policy`` and ``--policy-cache`` of both benchmarks."""
    parser.add_argument("--policy", help="checkpoint dir, or 'random' for the tiny preset with random "
                        "weights (default: the short SFT policy, trained once into --policy-cache)")
    parser.add_argument("--policy-cache", help="where the default SFT policy is kept (default: runs/bench)")


def add_grpo_preset_arguments(parser: Any, experiment: str, steps: int, steps_help: str) -> None:
    """The arguments of the benchmarks that run an ablation preset's GRPO stage: the policy's,
    ``--preset``, ``--experiment``, ``--steps``, ``--seed``, ``--threads`` and ``--quick``."""
    add_policy_arguments(parser)
    parser.add_argument("--preset", default="cpu", help="ablation preset whose GRPO stage is run (default: cpu)")
    parser.add_argument("--experiment", default=experiment, help=f"the variant (default: {experiment})")
    parser.add_argument("--steps", type=int, default=steps, help=steps_help)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the grid's jobs use 1)")
    parser.add_argument("--quick", action="store_true", help="a small batch of short episodes (smoke run)")


def grpo_preset_overrides(args: Any, checkpoint: str | Path) -> list[str]:
    """The preset's GRPO stage from ``checkpoint`` for ``args.steps`` steps, quiet (``--quick``:
    ``GRPO_QUICK`` on top); the caller adds the experiment and run_dir."""
    from agentgrpo.jobs.ablate import load_preset

    return [*load_preset(args.preset).get("grpo", []), f"policy.init={checkpoint}", f"seed={args.seed}",
            f"trainer.steps={args.steps}", "logging.progress=false", "logging.trackers=[]",
            *(GRPO_QUICK if args.quick else [])]


def load_benchmark_policy(bundle: EnvBundle, init: str | None, seed: int = 0, cache: str | Path | None = None,
                          quick: bool = False) -> tuple[Any, ChatFormat]:
    """The benchmark's policy (``policy_dir``) loaded: ``(model, chat format)``."""
    from agentgrpo.policy.hf import load_policy

    with tempfile.TemporaryDirectory(prefix="bench-policy-") as workdir:
        checkpoint = policy_dir(bundle, workdir, init, seed, cache, quick)
        model, tokenizer = load_policy(checkpoint)
        return model, chat_format(bundle, tokenizer, checkpoint)


def rollout_workload(args: Any) -> tuple[EnvConfig, EnvBundle, list[Task], Any, ChatFormat]:
    """The rollout benchmarks' batch: the generated world, its first ``args.tasks`` training tasks
    and the benchmark policy (``--policy``, ``--seed``, ``--policy-cache``, ``--quick``)."""
    env_config = EnvConfig()
    bundle = world(env_config)
    tasks = bundle.tasks(["covered_seen", "uncovered_seen"])[: args.tasks]
    model, chat = load_benchmark_policy(bundle, args.policy, args.seed, args.policy_cache, args.quick)
    return env_config, bundle, tasks, model, chat


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


def same_metrics(a: dict[str, float], b: dict[str, float], ignore: tuple[str, ...] = ("perf/",)) -> bool:
    """Two steps' metrics equal (NaN equal to NaN), leaving out the keys that start with ``ignore``
    (by default the timings)."""
    keys = {key for key in a if not key.startswith(ignore)}
    return keys == {key for key in b if not key.startswith(ignore)} and all(
        a[key] == b[key] or (math.isnan(a[key]) and math.isnan(b[key])) for key in keys)


def same_batches(a: Any, b: Any) -> bool:
    """Two ``RolloutBatch``es with the same episodes and the same old and reference log-probs
    (or both steps learned nothing: None)."""
    if a is None or b is None:
        return a is b
    return all(torch.equal(getattr(a, name), getattr(b, name)) if getattr(a, name) is not None
               else getattr(b, name) is None for name in ("input_ids", "old_logprobs", "ref_logprobs"))


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))


def bench(name: str, value: float, target: str = "info") -> None:
    """One ``BENCH <name> <value> target <op> <value>`` line (``target info``: no target)."""
    text = f"{value:.1f}" if abs(value) >= 100 else f"{value:.4g}"
    print(f"BENCH {name} {text} target {target}")
