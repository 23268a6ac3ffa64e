"""Rejection-sampling fine-tuning's data: a trained policy's own successful episodes.

``data.rft_policy`` names a trained policy (an earlier SFT's ``final``). It plays every
demonstration task (``data.splits`` of the training worlds) ``data.rft_samples`` times, sampled
at ``data.rft_rollout``'s temperature, each with its own scripted-user seed; the episodes the
grader scores 1 (a cut-off episode scores 0) join the oracle's demonstrations, one copy of each
distinct sequence of assistant turns per task (Yuan et al., 2023, keep distinct reasoning paths).
A turn of a kept episode that erred (malformed, or a call the tool rejected) stays in it as
context and is left out of the loss, as a recovery demonstration's wrong turn is.

Unlike the oracle's transcripts these are the states the policy reaches by itself, in its own
words, with its own choice among the moves that succeed; the SFT then trains on both. Each
episode is recorded as the policy saw it (in a delexicalised world, with ids as slots), the view
the SFT trains in, so the checkpoint must read the view the SFT's demonstrations are in.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from agentgrpo.envs.config import EnvConfig
from agentgrpo.envs.registry import EnvBundle, make_env
from agentgrpo.envs.types import Step, Task
from agentgrpo.openai_client import llm_user_client
from agentgrpo.policy.device import AutocastOn, autocast, model_device
from agentgrpo.policy.hf import load_agent
from agentgrpo.rollout.config import RolloutConfig
from agentgrpo.rollout.engine import EpisodeSpec, RolloutEngine, copy_kinds
from agentgrpo.train.demonstrations import Demonstration
from agentgrpo.train.sft_config import RFT_SEED_OFFSET
from agentgrpo.train.task_sampler import is_write_task


@dataclass
class OwnEpisodes:
    """What the sampling found: the demonstrations kept, and their counts (``sft_stats.json``'s ``rft``)."""

    demos: list[Demonstration] = field(default_factory=list)
    episodes: int = 0
    successful: int = 0
    tasks: int = 0
    tasks_solved: int = 0
    write_tasks: int = 0
    write_tasks_solved: int = 0
    with_erred_turns: int = 0
    """Kept episodes with a malformed turn or a rejected call, which stays as untrained context."""
    kept_by_family: Counter[str] = field(default_factory=Counter)

    def stats(self) -> dict[str, Any]:
        return {"episodes": self.episodes, "successful": self.successful, "kept": len(self.demos),
                "tasks": self.tasks, "tasks_solved": self.tasks_solved, "write_tasks": self.write_tasks,
                "write_tasks_solved": self.write_tasks_solved, "with_erred_turns": self.with_erred_turns,
                "kept_by_family": dict(sorted(self.kept_by_family.items()))}


EPISODES_FILE = "rft_episodes.jsonl"
"""In an SFT's run_dir: what its rejection sampling kept (a header with the sampling's settings and
counts, then one demonstration a line), to read, and for ``--resume`` not to sample again."""


def save_own_episodes(found: OwnEpisodes, path: str | Path, settings: Mapping[str, Any]) -> None:
    """Write ``found`` to ``path`` (``EPISODES_FILE``) atomically, headed by the ``settings`` it was sampled with."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with tmp.open("w") as out:
        out.write(json.dumps({"settings": dict(settings), "counts": found.stats()}, default=str) + "\n")
        for demo in found.demos:
            out.write(json.dumps(asdict(demo), default=str) + "\n")
    os.replace(tmp, path)


def load_own_episodes(path: str | Path, settings: Mapping[str, Any]) -> OwnEpisodes | None:
    """What ``save_own_episodes`` wrote to ``path``, if it was sampled with these ``settings``; else None."""
    path = Path(path)
    if not path.is_file():
        return None
    lines = path.read_text().splitlines()
    try:
        header = json.loads(lines[0]) if lines else {}
    except json.JSONDecodeError:
        return None
    if header.get("settings") != json.loads(json.dumps(dict(settings), default=str)):
        return None
    counts = header["counts"]
    demos = [Demonstration(**{**row, "untrained": tuple(row["untrained"])}) for row in map(json.loads, lines[1:])]
    if len(demos) != counts["kept"]:
        return None  # not the whole file: sample again
    counters = {k: v for k, v in counts.items() if k not in ("kept", "kept_by_family")}  # stats()'s other keys
    return OwnEpisodes(demos=demos, kept_by_family=Counter(counts["kept_by_family"]), **counters)


def assistant_path(messages: Sequence[dict[str, Any]]) -> str:
    """The assistant turns of a transcript (text and calls), the identity two episodes share when
    the policy did the same thing in both."""
    return json.dumps([[m.get("content"), m.get("tool_calls")] for m in messages if m.get("role") == "assistant"],
                      sort_keys=True, default=str)


def erred_turns(messages: Sequence[dict[str, Any]], steps: Sequence[Step]) -> tuple[int, ...]:
    """Indices in ``messages`` of the assistant turns whose step erred (a malformed turn, a call the
    tool rejected): context for the turns that recovered, not something to learn to say."""
    assistant = [i for i, message in enumerate(messages) if message.get("role") == "assistant"]
    if len(assistant) != len(steps):
        raise ValueError(f"{len(assistant)} assistant turns for {len(steps)} steps: not one episode's transcript")
    return tuple(i for i, step in zip(assistant, steps, strict=True) if step.error)


def own_successful_episodes(source: str, worlds: Sequence[EnvBundle], env: EnvConfig, splits: Sequence[str],
                            samples: int, rollout: RolloutConfig, seed: int, write_tools: Collection[str],
                            use_autocast: AutocastOn = False, device: torch.device | str | None = None) -> OwnEpisodes:
    """Play every ``splits`` task of ``worlds`` ``samples`` times with the policy from ``source``
    (in ``env``'s view of ids, on ``device``: None, the CPU) and keep the distinct successful
    episodes as demonstrations."""
    tasks: list[tuple[EnvBundle, Task]] = [(world, task) for world in worlds for task in world.tasks(splits)]
    found = OwnEpisodes(tasks=len(tasks))
    if not tasks or samples < 1:
        return found
    domain = tasks[0][0].domain  # tools and policy text are the same in every world
    model, chat = load_agent(source, domain.tool_schemas(), domain.policy, device=device)
    engine = RolloutEngine(model, chat, rollout, copy_kinds(rollout, env))
    user_client = llm_user_client(env.user)
    specs, seeds = [], []
    for world, task in tasks:
        for k in range(samples):
            user_seed = seed * 1000 + RFT_SEED_OFFSET + k
            specs.append(EpisodeSpec(make_env(world, task, env, user_seed, max_steps=rollout.max_turns,
                                              user_client=user_client), task.task_id, task.task_id, k))
            seeds.append(user_seed)
    with autocast(model_device(model), use_autocast):
        trajectories = engine.run(specs, seed=seed)
    found.episodes = len(trajectories)
    seen: set[tuple[str, str]] = set()
    solved: set[str] = set()
    for index, traj in enumerate(trajectories):
        _, task = tasks[index // samples]
        if traj.outcome_reward != 1.0:
            continue
        found.successful += 1
        solved.add(task.task_id)
        messages = traj.transcript
        key = (task.task_id, assistant_path(messages))
        if key in seen:
            continue
        seen.add(key)
        found.kept_by_family[task.family] += 1
        untrained = erred_turns(messages, traj.steps)
        found.with_erred_turns += bool(untrained)
        found.demos.append(Demonstration(task.task_id, seeds[index], traj.outcome_reward, messages, untrained,
                                         source="policy"))
    writes = {task.task_id for _, task in tasks if is_write_task(task, write_tools)}
    found.tasks_solved, found.write_tasks = len(solved), len(writes)
    found.write_tasks_solved = len(solved & writes)
    return found
