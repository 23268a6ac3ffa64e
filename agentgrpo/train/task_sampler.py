"""Which training tasks a GRPO step rolls out (``trainer.task_sampler``): uniform or frontier.

``uniform`` is the epoch-wise schedule (``TaskSchedule``): every task once per epoch, in a
seeded order. ``frontier`` draws tasks with weight ``max(p(1−p), floor)`` from each task's
recent success rate ``p`` (an EMA over the groups rolled out on it; a task never tried gets
the largest weight, 1/4, as if p = 1/2): a task the policy always solves or always fails
yields a group without outcome signal, a task at p = 1/2 the most (the learnability of
Tzannetos et al. 2023 and of the "learning at the frontier" samplers of agentic RL).

Both serve every generation round of a step (dynamic sampling asks for more tasks when
groups were outcome-saturated: ``trainer.dynamic_sampling``): round 0 of ``uniform`` is the
schedule's slice, as it has always been; later rounds draw uniformly among the tasks not yet
drawn in the step. Every draw is seeded by ``derive_seed(kind, seed, step, round)`` and no
random state is carried between draws, so the only state is the frontier's per-task
statistics (and its pool): ``state_dict`` goes into each checkpoint's ``trainer_state.json``
and a resumed run draws exactly what the uninterrupted one would have drawn.

The pool is the training split; ``refill(step)`` (a ``TaskRefill``) may add fresh tasks at
the start of each step — the hook for a domain that generates new training tasks. It must be
a pure function of the step: a resumed run calls it again for the steps before the
checkpoint to rebuild the same pool.

``Strata`` (``trainer.write_task_share``) stratifies every round's draw by whether a task needs
a write: ``round(share · k)`` of its ``k`` tasks come from the write tasks and the rest from
the others, each drawn by the sampler's own rule within its stratum. A pool that happens to
draw no write task in a step then still trains on some, so the gradient of the tasks that need
no change (where "call no write tool" is what succeeds) cannot be the whole step.
"""
from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from agentgrpo import metric_names as metric
from agentgrpo.config import ConfigError
from agentgrpo.envs.types import Task

SamplerKind = Literal["uniform", "frontier"]
FrontierKey = Literal["task", "family"]
TaskRefill = Callable[[int], list[Task]]
"""Fresh training tasks for a step (called once per step, before its first draw); a pure function of the step."""

MAX_LEARNABILITY = 0.25
"""p(1−p) at p = 1/2: the weight of a task never tried (an optimistic prior)."""


def is_write_task(task: Task, write_tools: Collection[str]) -> bool:
    """Whether the task's gold actions call a write tool (its solution changes the state)."""
    return any(action.name in write_tools for action in task.actions)


@dataclass(frozen=True)
class Strata:
    """``trainer.write_task_share``: each round draws ``quota(k)`` write tasks and ``k − quota(k)`` others."""

    write_share: float
    write_tools: frozenset[str]

    def quota(self, k: int) -> int:
        """How many of ``k`` tasks are write tasks (rounded half to even, as Python's round)."""
        return round(self.write_share * k)

    def is_write(self, task: Task) -> bool:
        return is_write_task(task, self.write_tools)

    def split(self, tasks: list[Task]) -> tuple[list[Task], list[Task]]:
        """(write tasks, the others), each in pool order."""
        return [t for t in tasks if self.is_write(t)], [t for t in tasks if not self.is_write(t)]

    def check(self, tasks: list[Task], k: int) -> None:
        """A ConfigError naming ``trainer.write_task_share`` when a stratum with a quota has no task."""
        write, other = self.split(tasks)
        for name, pool, quota in (("write", write, self.quota(k)), ("no-write", other, k - self.quota(k))):
            if quota and not pool:
                raise ConfigError(f"trainer.write_task_share={self.write_share} asks for {quota} {name} task(s) "
                                 f"a round, but the training pool of {len(tasks)} tasks has no {name} task")


def derive_seed(*parts: Any) -> int:
    """A stable 63-bit seed from parts (Python's hash() is salted per process)."""
    return random.Random(":".join(map(str, parts))).getrandbits(63)


class TaskSchedule:
    """Which tasks step s trains on: epoch-wise seeded permutations, a pure function of s."""

    def __init__(self, tasks: list, tasks_per_step: int, seed: int, name: str = "tasks"):
        if not tasks and tasks_per_step:
            raise ValueError("no training tasks: check trainer.task_splits and env.splits")
        self.tasks, self.k, self.seed, self.name = tasks, tasks_per_step, seed, name

    def for_step(self, step: int) -> list:
        n = len(self.tasks)
        picked = []
        for position in range(step * self.k, (step + 1) * self.k):
            epoch, index = divmod(position, n)
            order = list(range(n))
            random.Random(derive_seed(self.name, self.seed, epoch)).shuffle(order)
            picked.append(self.tasks[order[index]])
        return picked


class UniformSampler:
    """``trainer.task_sampler=uniform``: the schedule's tasks in round 0, uniform draws after.
    With ``strata``, round 0 is one schedule per stratum (write tasks first)."""

    def __init__(self, tasks: list[Task], tasks_per_step: int, seed: int, strata: Strata | None = None):
        if not tasks:
            raise ValueError("no training tasks: check trainer.task_splits and env.splits")
        if strata is None:
            self.schedules = [TaskSchedule(tasks, tasks_per_step, seed)]
        else:
            strata.check(tasks, tasks_per_step)
            write, other = strata.split(tasks)
            quota = strata.quota(tasks_per_step)
            self.schedules = [TaskSchedule(write, quota, seed, name="tasks:write"),
                              TaskSchedule(other, tasks_per_step - quota, seed, name="tasks:no_write")]
        self.tasks, self.k, self.seed, self.strata = tasks, tasks_per_step, seed, strata

    def draw(self, step: int, generation_round: int, exclude: Iterable[str] = ()) -> list[Task]:
        """``tasks_per_step`` tasks for one generation round of ``step``; later rounds avoid ``exclude`` (ids)."""
        if generation_round == 0:
            return [task for schedule in self.schedules for task in schedule.for_step(step)]
        rng = random.Random(derive_seed("tasks", self.seed, step, generation_round))
        return _fill(rng, self.tasks, self.k, set(exclude), key=lambda _: rng.random(), strata=self.strata)

    def observe(self, outcomes: dict[str, list[float]]) -> None:
        """Nothing to learn: the uniform draws do not depend on results."""

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "uniform"}

    def load_state_dict(self, state: dict[str, Any], step: int) -> None:
        """Nothing to restore: every draw is a function of (seed, step, round)."""

    def metrics(self) -> dict[str, float]:
        return {}


class FrontierSampler:
    """``trainer.task_sampler=frontier``: tasks drawn with weight ``max(p(1−p), floor)``.

    ``p`` of a task is an EMA of its groups' mean outcome (the first group sets it; then
    ``p ← (1 − ema)·p + ema·mean``); a task never tried weighs ``MAX_LEARNABILITY``. A round
    draws ``tasks_per_step`` distinct tasks without replacement (Efraimidis–Spirakis keys
    ``u^(1/w)``), preferring tasks not yet drawn in the step.

    ``by="family"`` pools the statistics of a family's tasks (``trainer.frontier_by``): one
    group tells the weight of every task of its family, so a large pool of fresh tasks, most
    never tried, is still drawn by what the policy can learn, not uniformly.
    """

    def __init__(self, tasks: list[Task], tasks_per_step: int, seed: int, *, floor: float, ema: float,
                 refill: TaskRefill | None = None, strata: Strata | None = None, by: FrontierKey = "task"):
        if not tasks:
            raise ValueError("no training tasks: check trainer.task_splits and env.splits")
        if strata is not None:
            strata.check(tasks, tasks_per_step)
        if by not in ("task", "family"):
            raise ConfigError(f"trainer.frontier_by must be 'task' or 'family', got {by!r}")
        self.k, self.seed, self.floor, self.ema, self.refill = tasks_per_step, seed, floor, ema, refill
        self.strata, self.by = strata, by
        self.pool: dict[str, Task] = {}
        self._add(tasks)
        self.stats: dict[str, tuple[float, int]] = {}  # task id (or family) → (success EMA p, groups observed)
        self._refilled_through = -1

    def _add(self, tasks: list[Task]) -> None:
        for task in tasks:
            known = self.pool.get(task.task_id)
            if known is not None and known is not task:
                raise ValueError(f"two training tasks share the id {task.task_id!r}: the frontier sampler keys its "
                                 "statistics by task id")
            self.pool[task.task_id] = task

    def _refill_until(self, step: int) -> None:
        """Call ``refill`` for every step up to ``step`` not yet refilled (in order)."""
        while self.refill is not None and self._refilled_through < step:
            self._refilled_through += 1
            self._add(self.refill(self._refilled_through))

    def stats_key(self, task_id: str) -> str:
        """Where a task's statistics are kept: its id, or with ``by="family"`` its family."""
        return self.pool[task_id].family if self.by == "family" and task_id in self.pool else task_id

    def weight(self, task_id: str) -> float:
        """``max(p(1−p), floor)``; ``MAX_LEARNABILITY`` for a task (or family) never tried."""
        key = self.stats_key(task_id)
        if key not in self.stats:
            return MAX_LEARNABILITY
        p = self.stats[key][0]
        return max(p * (1.0 - p), self.floor)

    def weights(self) -> dict[str, float]:
        return {task_id: self.weight(task_id) for task_id in self.pool}

    def draw(self, step: int, generation_round: int, exclude: Iterable[str] = ()) -> list[Task]:
        self._refill_until(step)
        rng = random.Random(derive_seed("frontier", self.seed, step, generation_round))
        # Efraimidis–Spirakis: the k largest u^(1/w) are a weighted draw without replacement
        return _fill(rng, list(self.pool.values()), self.k, set(exclude),
                     key=lambda task: rng.random() ** (1.0 / self.weight(task.task_id)), strata=self.strata)

    def observe(self, outcomes: dict[str, list[float]]) -> None:
        """Fold each group's outcomes (task id → the finite outcome rewards of its episodes) into p."""
        for task_id, values in outcomes.items():
            values = [v for v in values if math.isfinite(v)]
            if not values:
                continue
            mean, key = statistics.fmean(values), self.stats_key(task_id)
            if key in self.stats:
                p, n = self.stats[key]
                self.stats[key] = ((1.0 - self.ema) * p + self.ema * mean, n + 1)
            else:
                self.stats[key] = (mean, 1)

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "frontier", "by": self.by, "pool": list(self.pool),
                "stats": {key: list(value) for key, value in self.stats.items()}}

    def load_state_dict(self, state: dict[str, Any], step: int) -> None:
        """Restore the statistics saved after ``step`` steps, rebuilding the pool by refilling up to it."""
        self._refill_until(step - 1)
        if state.get("kind") != "frontier":
            raise ConfigError(f"trainer.task_sampler=frontier, but the checkpoint holds {state.get('kind')!r} "
                              "sampler state: start a new run_dir")
        if state.get("by", "task") != self.by:  # (checkpoints from before frontier_by kept task statistics)
            raise ConfigError(f"trainer.frontier_by={self.by}, but the checkpoint's sampler kept statistics by "
                              f"{state.get('by', 'task')}: resume with the same setting")
        if state["pool"] != list(self.pool):
            raise ConfigError("trainer.task_sampler=frontier: the task pool differs from the checkpoint's "
                              f"({len(state['pool'])} saved, {len(self.pool)} now): the refill must be a pure "
                              "function of the step, and trainer.task_splits / env.splits unchanged")
        self.stats = {key: (float(p), int(n)) for key, (p, n) in state["stats"].items()}

    def metrics(self) -> dict[str, float]:
        """``sampler/``: pool size, share never tried, share above the floor (the frontier), mean p of tried."""
        weights = self.weights()
        keys = [self.stats_key(task_id) for task_id in self.pool]
        tried = [self.stats[key][0] for key in keys if key in self.stats]  # per pool task
        return {metric.SAMPLER_POOL_TASKS: float(len(self.pool)),
                metric.SAMPLER_UNTRIED_FRAC: 1.0 - len(tried) / len(self.pool),
                metric.SAMPLER_FRONTIER_FRAC: sum(w > self.floor for w in weights.values()) / len(self.pool),
                metric.SAMPLER_SUCCESS_MEAN: statistics.fmean(tried) if tried else math.nan}


TaskSampler = UniformSampler | FrontierSampler


def _fill(rng: random.Random, tasks: list[Task], k: int, exclude: set[str], key: Callable[[Task], float],
          strata: Strata | None = None) -> list[Task]:
    """The ``k`` tasks with the largest ``key``, preferring those not in ``exclude``; when the pool
    is smaller than ``k`` it is drawn again (a task may then have two groups in a step). With
    ``strata``: the ``quota(k)`` best write tasks, then the ``k − quota(k)`` best others."""
    keys = [key(task) for task in tasks]  # one key per task, in pool order: a function of the rng alone
    if strata is None:
        return _best(list(range(len(tasks))), tasks, keys, k, exclude)
    write = [strata.is_write(task) for task in tasks]
    quota = strata.quota(k)
    return (_best([i for i in range(len(tasks)) if write[i]], tasks, keys, quota, exclude)
            + _best([i for i in range(len(tasks)) if not write[i]], tasks, keys, k - quota, exclude))


def _best(indices: list[int], tasks: list[Task], keys: list[float], k: int, exclude: set[str]) -> list[Task]:
    ranked = sorted(indices, key=lambda i: (tasks[i].task_id in exclude, -keys[i], i))
    return [tasks[ranked[i % len(ranked)]] for i in range(k)]


def make_task_sampler(kind: SamplerKind, tasks: list[Task], tasks_per_step: int, seed: int, *,
                      floor: float = 0.05, ema: float = 0.5, refill: TaskRefill | None = None,
                      strata: Strata | None = None, frontier_by: FrontierKey = "task") -> TaskSampler:
    """The sampler ``trainer.task_sampler`` names (``refill`` only matters to ``frontier``), its draws
    stratified by ``strata`` when given."""
    if kind == "frontier":
        return FrontierSampler(tasks, tasks_per_step, seed, floor=floor, ema=ema, refill=refill, strata=strata,
                               by=frontier_by)
    return UniformSampler(tasks, tasks_per_step, seed, strata=strata)
