"""Which tasks an evaluation plays, in which world, and what each task says about the floor.

Three sources: ``EvalConfig.tasks_per_split`` = 0 (and no ``tasks_per_family``) evaluates
the splits of ``env`` itself (the training pool's covered_seen / uncovered_seen / unseen and
its validation tasks: cheap, and comparable with the seed's numbers); ``tasks_per_split`` N > 0
draws N fresh tasks per split from held-out worlds (the domain's ``build_heldout``, e.g. the
airline's), labelled by where their family stands in training; ``tasks_per_family`` N > 0
draws from the same worlds N tasks of every family of the splits (the first N of each, world
after world), so every family weighs alike in overall pass^1.

``TaskFacts`` are read off each task's gold actions and grader, never off an episode:
``do_nothing`` is the reward of an empty episode (no tool call, no reply: τ-bench's
grader compares database hashes and looks for the required outputs, so a task that needs
no write and no output is solved by doing nothing), and ``write`` says the gold actions
change the database (the tasks where an agent must act to score).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from agentgrpo.config import ConfigError
from agentgrpo.envs.registry import EnvBundle, build_env, build_heldout, split_families
from agentgrpo.envs.types import Task
from agentgrpo.eval.config import EvalConfig


@dataclass(frozen=True)
class TaskFacts:
    """What a task's grader gives without an agent.

    do_nothing: reward of an empty episode (1.0: doing nothing solves it).
    write: the gold actions change the database (gold hash ≠ the fresh database's).
    """

    do_nothing: float
    write: bool


@dataclass(frozen=True)
class EvalTask:
    """One evaluated task, its split, and the world (bundle) its episodes run in."""

    split: str
    task: Task
    bundle: EnvBundle

    @property
    def facts(self) -> TaskFacts:
        return task_facts(self.bundle, self.task)


def task_facts(bundle: EnvBundle, task: Task) -> TaskFacts:
    domain = bundle.domain
    fresh = domain.new_state()
    grade = domain.grade(fresh, task, [])
    return TaskFacts(do_nothing=grade.reward, write=grade.gold_hash != fresh.db_hash())


def eval_tasks(config: EvalConfig, bundle: EnvBundle | None = None) -> list[EvalTask]:
    """The tasks of ``config.splits`` in order (split by split), each with its world.

    ``bundle``: the training environment ``build_env(config.env)`` (built when not given);
    with ``tasks_per_split`` = 0 its splits are what is evaluated, otherwise its training
    splits only decide which families each held-out split draws.
    """
    bundle = bundle or build_env(config.env)
    if config.tasks_per_family:
        tasks = _per_family(config, bundle)
    elif config.tasks_per_split == 0:
        return [EvalTask(split, task, bundle) for split in config.splits for task in bundle.splits[split]]
    else:
        tasks = _heldout(config, bundle, config.tasks_per_split)
    if not tasks:
        raise ConfigError(f"splits={config.splits} holds no held-out task: no family stands there in training "
                          "(with env.splits' default 16/24 every family is trained on, so unseen is empty); "
                          "add covered_seen/uncovered_seen, or train on fewer families")
    return tasks


def _heldout(config: EvalConfig, bundle: EnvBundle, per_split: int) -> list[EvalTask]:
    worlds = build_heldout(config.env, config.splits, per_split, config.heldout_seed, training=bundle)
    return [EvalTask(split, task, world) for split in config.splits for world in worlds
            for task in world.splits.get(split, [])]


def _per_family(config: EvalConfig, bundle: EnvBundle) -> list[EvalTask]:
    """``tasks_per_family`` tasks of every family of the splits: a draw of N × (its families) per
    split (larger if a family falls short), of which each family keeps its first N."""
    wanted = config.tasks_per_family
    families = split_families(config.env, bundle)
    for scale in (1, 2, 4):
        per_split = max(wanted * len(families.get(split, [])) for split in config.splits) * scale
        drawn = _heldout(config, bundle, per_split) if per_split else []
        counts = Counter((t.split, t.task.family) for t in drawn)
        short = [(s, f) for s in config.splits for f in families.get(s, []) if counts[(s, f)] < wanted]
        if not short:
            break
    else:
        raise ConfigError(f"tasks_per_family={wanted} is more than the held-out worlds give family "
                          f"{short[0][1]!r} of {short[0][0]}; ask for fewer")
    kept: Counter[tuple[str, str]] = Counter()
    tasks = []
    for task in drawn:
        key = (task.split, task.task.family)
        if kept[key] < wanted:
            kept[key] += 1
            tasks.append(task)
    return tasks


def select_tasks(tasks: list[EvalTask], task_ids: list[str] | None) -> list[EvalTask]:
    """The tasks whose ids are in ``task_ids`` (all of them for None), in evaluation order;
    an id that is not among ``tasks`` is a ConfigError naming it and a few valid ones."""
    if not task_ids:
        return tasks
    known = [t.task.task_id for t in tasks]
    unknown = [i for i in task_ids if i not in set(known)]
    if unknown:
        raise ConfigError(f"task_ids: {unknown[:5]} not among the {len(known)} tasks of the evaluated splits "
                          f"(e.g. {known[:5]}); `agentgrpo env tasks` lists them")
    wanted = set(task_ids)
    return [t for t in tasks if t.task.task_id in wanted]
