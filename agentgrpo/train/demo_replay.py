"""The demonstration term of GRPO's updates (``trainer.demo_coef``).

Across GRPO steps every kind of correct turn loses likelihood against the SFT it started from
(``agentgrpo eval --likelihood``), correct write calls included, which few write groups' signal
defends. A KL penalty anchors the tokens the policy sampled; this term anchors the correct
actions themselves. Every update adds ``demo_coef`` × the token-mean NLL of a few oracle
demonstrations, of the training worlds' tasks of the splits SFT was shown (``trainer.demo_splits``),
rendered exactly as SFT rendered them (the assistant turns labelled), as InstructGPT's PPO-ptx
mixes its pretraining loss into PPO.

The demonstrations are collected once, when the trainer starts (the oracle with the scripted
user, one episode per task, as in SFT); which of them an update replays is a pure function of
``(seed, step, update)``, so a resumed run replays what the uninterrupted run would have.

``SuccessReplay`` is the same term on the policy's own successes (``trainer.success_coef``):
self-imitation (Oh et al., 2018) of the write episodes that succeeded in earlier steps, so a
correct write the policy found once keeps its likelihood after its group's step is over — where
the oracle's demonstrations cannot reach, a family SFT never showed included. The buffer is part
of the checkpoint, so a resumed run replays the same episodes.

``PreserveSet`` keeps the same episodes for ``trainer.preserve_writes``, each with its per-token
log-likelihood when it was kept (its anchor), which the update is kept from lowering.
"""
from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from agentgrpo.agent.chat import ChatFormat
from agentgrpo.agent.masking import IGNORE_INDEX, SFTExample
from agentgrpo.agent.types import Trajectory
from agentgrpo.config import ConfigError
from agentgrpo.envs.config import EnvConfig
from agentgrpo.envs.registry import EnvBundle
from agentgrpo.train.demonstrations import collect_demonstrations, training_examples
from agentgrpo.train.rollout_metrics import executed_write
from agentgrpo.train.sft_config import SFTDataConfig
from agentgrpo.train.task_sampler import derive_seed, is_write_task

DEFAULT_DEMONSTRATED_SPLITS: list[str] = SFTDataConfig().splits
"""What an SFT checkpoint that records no ``demonstrated_splits`` was shown: SFT's default ``data.splits``."""


class DemoReplay:
    """The demonstrations as SFT examples, and each update's draw of them."""

    def __init__(self, examples: list[SFTExample], batch_size: int, seed: int, task_ids: list[str] | None = None):
        """``task_ids``: the task each example demonstrates, in order (for the record)."""
        if not examples:
            raise ConfigError("trainer.demo_coef > 0 but no training task has a successful oracle demonstration "
                              "that fits rollout.max_total_tokens; set trainer.demo_coef=0")
        self.examples, self.batch_size, self.seed = examples, batch_size, seed
        self.task_ids = task_ids

    @classmethod
    def collect(cls, worlds: list[EnvBundle], env: EnvConfig, splits: list[str], chat: ChatFormat, *,
                only_write: frozenset[str] | None, batch_size: int, max_length: int, seed: int) -> DemoReplay:
        """One oracle demonstration of each ``splits`` task of every world in ``worlds`` (or of the
        write tasks among them when ``only_write`` holds the domain's write tools), rendered
        through ``chat`` as the policy sees them, at most ``max_length`` tokens each."""
        wanted = {t.task_id for world in worlds for t in world.tasks(splits)
                  if only_write is None or is_write_task(t, only_write)}
        if not wanted:
            raise ConfigError(f"trainer.demo_splits={splits}: the training worlds hold no task of these splits"
                              + (" that needs a write (trainer.demo_tasks=write)" if only_write else ""))
        examples, task_ids = [], []
        for demo in collect_demonstrations(worlds, env, splits, per_task=1, seed=seed):
            if demo.task_id not in wanted:
                continue
            rendered, _ = training_examples(chat, [demo.messages], max_length)  # [] when too long
            if rendered:
                examples.append(rendered[0])
                task_ids.append(demo.task_id)
        return cls(examples, batch_size, seed, task_ids)

    def draw(self, step: int, update: int) -> list[SFTExample]:
        """The demonstrations update ``update`` (counting from 0) of step ``step`` replays."""
        rng = random.Random(derive_seed("demo", self.seed, step, update))
        return rng.sample(self.examples, min(self.batch_size, len(self.examples)))


def demo_write_tools(demo_tasks: str, write_tools: Collection[str]) -> frozenset[str] | None:
    """``trainer.demo_tasks`` as ``DemoReplay.collect``'s ``only_write``: None for every task."""
    if demo_tasks == "all":
        return None
    if not write_tools:
        raise ConfigError("trainer.demo_tasks=write: this domain declares no write_tools, so no task is known "
                          "to need a write; use trainer.demo_tasks=all")
    return frozenset(write_tools)


class SuccessReplay:
    """The policy's latest ``capacity`` successful write episodes (outcome 1 and a write executed),
    as SFT examples labelled on the tokens the policy sampled, and each update's draw of them."""

    def __init__(self, capacity: int, batch_size: int, seed: int, write_tools: Collection[str],
                 term: str = "trainer.success_coef > 0", off: str = "trainer.success_coef=0"):
        """``term`` / ``off``: the setting that asked for the buffer and how to turn it off (the error's words)."""
        if not write_tools:
            raise ConfigError(f"{term}: this domain declares no write_tools, so no episode is "
                              f"known to have written; set {off}")
        self.buffer: deque[SFTExample] = deque(maxlen=capacity)
        self.batch_size, self.seed, self.write_tools = batch_size, seed, frozenset(write_tools)

    def add(self, trajectories: list[Trajectory]) -> int:
        """Keep the successful write episodes of ``trajectories`` (the oldest leave when full);
        returns how many were added."""
        added = self.successes(trajectories)
        self.buffer.extend(added)
        return len(added)

    def successes(self, trajectories: list[Trajectory]) -> list[SFTExample]:
        """The successful write episodes of ``trajectories`` (outcome 1, a write executed), as examples."""
        return [episode_example(t) for t in trajectories
                if t.outcome_reward >= 1.0 and executed_write(t, self.write_tools)]

    def draw(self, step: int, update: int) -> list[SFTExample]:
        """The episodes update ``update`` (counting from 0) of step ``step`` replays (none while empty)."""
        rng = random.Random(derive_seed("success", self.seed, step, update))
        return rng.sample(list(self.buffer), min(self.batch_size, len(self.buffer)))

    def state_dict(self) -> dict[str, Any]:
        return {"episodes": [{"input_ids": e.input_ids, "labels": e.labels} for e in self.buffer]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buffer.clear()
        self.buffer.extend(SFTExample(list(e["input_ids"]), list(e["labels"])) for e in state.get("episodes", []))


@dataclass(frozen=True)
class Anchored:
    """A kept episode and its per-token log-likelihood when kept (``[]``: not measured, as the
    projection needs none)."""

    example: SFTExample
    anchor: list[float]


class PreserveSet(SuccessReplay):
    """``trainer.preserve_writes``' episodes: the latest successful write episodes, as ``SuccessReplay``
    keeps and draws them, each ``Anchored`` to its log-likelihood when kept."""

    def __init__(self, capacity: int, batch_size: int, seed: int, write_tools: Collection[str]):
        super().__init__(capacity, batch_size, seed, write_tools, term="trainer.preserve_writes",
                         off="trainer.preserve_writes=off")

    def add(self, trajectories: list[Trajectory],
            anchor: Callable[[list[SFTExample]], list[list[float]]] | None = None) -> int:
        """Keep the successful write episodes of ``trajectories``, each with ``anchor(examples)``'s
        log-probs (none without); returns how many were added."""
        added = self.successes(trajectories)
        anchors = anchor(added) if anchor is not None and added else [[] for _ in added]
        self.buffer.extend(Anchored(e, a) for e, a in zip(added, anchors))
        return len(added)

    def state_dict(self) -> dict[str, Any]:
        return {"episodes": [{"input_ids": a.example.input_ids, "labels": a.example.labels, "anchor": a.anchor}
                             for a in self.buffer]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buffer.clear()
        self.buffer.extend(Anchored(SFTExample(list(e["input_ids"]), list(e["labels"])), list(e.get("anchor", [])))
                           for e in state.get("episodes", []))


def episode_example(trajectory: Trajectory) -> SFTExample:
    """An episode as an SFT example: its tokens, labelled where the policy sampled them."""
    return SFTExample(list(trajectory.token_ids),
                      [tok if m else IGNORE_INDEX for tok, m in zip(trajectory.token_ids, trajectory.response_mask)])
