"""Generated airline tasks: the family registry, ``generate_domain`` and ``split_tasks``.

``generate_domain(seed, n_tasks)`` draws a world, then tasks from every registered
family in a balanced, seeded order, verifies each task by executing its gold actions
on a fresh database (every call must succeed), and returns an ``AirlineDomain``.
``split_tasks`` cuts a task list into the seed's three splits, stratified by family.
``continue_tasks`` draws more tasks of chosen families from the same world (the validation
split: see ``agentgrpo.envs.airline.factory``).
The families themselves live in ``families_cancel``, ``families_modify`` and
``families_book`` and register into ``task_common.FAMILIES``.
"""
from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from typing import Any

from agentgrpo.envs.airline.core.domain import AirlineDomain
from agentgrpo.envs.airline.core.policy import load_policy
from agentgrpo.envs.airline.tasks import families_book, families_cancel, families_modify  # noqa: F401
from agentgrpo.envs.airline.tasks.common import FAMILIES, FamilyContext, NoCandidate
from agentgrpo.envs.airline.tasks.world import generate_world, world_airports
from agentgrpo.envs.types import Task

FAMILY_NAMES: tuple[str, ...] = tuple(FAMILIES)
"""Every registered task family, in registration order."""
SPLITS: tuple[str, ...] = ("covered_seen", "uncovered_seen", "unseen")
MAX_ATTEMPTS = 40


def family_schedule(n_tasks: int, families: Sequence[str], seed: int) -> list[str]:
    """Family of each task index: rounds of seeded permutations (counts differ by <= 1)."""
    rng = random.Random(f"schedule:{seed}")
    order: list[str] = []
    while len(order) < n_tasks:
        round_ = list(families)
        rng.shuffle(round_)
        order += round_
    return order[:n_tasks]


def _check_families(families: Sequence[str] | None) -> list[str]:
    names = list(FAMILY_NAMES if families is None else families)
    unknown = [f for f in names if f not in FAMILIES]
    if unknown or not names:
        raise ValueError(f"unknown task families {unknown}; known: {list(FAMILY_NAMES)}")
    return names


def generate_tasks(world: dict[str, Any], seed: int, n_tasks: int,
                   families: Sequence[str] | None = None) -> list[Task]:
    """``n_tasks`` tasks over ``world`` (not yet verified; see ``generate_domain``)."""
    names = _check_families(families)
    used: dict[str, set[str]] = {name: set() for name in names}
    tasks = []
    for index, name in enumerate(family_schedule(n_tasks, names, seed)):
        for attempt in range(MAX_ATTEMPTS):
            ctx = FamilyContext(world, random.Random(f"task:{seed}:{index}:{attempt}"), used[name])
            try:
                draft = FAMILIES[name](ctx)
                break
            except NoCandidate:
                continue
        else:
            raise ValueError(f"the world has no candidate for task family {name!r}; "
                             f"generate a larger world (n_users, n_reservations)")
        tasks.append(Task(task_id=f"gen-{seed}-{index}-{name}", user_id=draft.scenario.user_id,
                          instruction=draft.instruction, actions=draft.actions,
                          outputs=draft.outputs, family=name, scenario=draft.scenario))
    return tasks


def verify_gold(domain: AirlineDomain, task: Task) -> None:
    """Execute the gold actions on a fresh database; any error observation is a bug."""
    state = domain.new_state()
    for action in task.actions:
        observation = domain.execute(state, action.name, action.kwargs)
        if domain.is_error(observation):
            raise ValueError(f"gold action {action.name} of {task.task_id} failed: {observation}")


def generate_domain(seed: int = 0, n_tasks: int = 100, families: Sequence[str] | None = None,
                    compat: str = "fixed", **world_kwargs: Any) -> AirlineDomain:
    """A generated world with ``n_tasks`` verified tasks covering ``families`` (default all).

    ``world_kwargs`` are ``WorldSpec`` fields (``n_users``, ``n_flights``, ...).
    """
    world = generate_world(seed, **world_kwargs)
    tasks = generate_tasks(world, seed, n_tasks, families)
    domain = AirlineDomain(world, tasks, load_policy(), compat,  # type: ignore[arg-type]
                           airports=world_airports(world), copy_data=False)
    for task in tasks:
        verify_gold(domain, task)
    return domain


def split_tasks(tasks: Sequence[Task], covered_seen: int = 16, uncovered_seen: int = 24,
                unseen: int = 10, seed: int = 0) -> dict[str, list[Task]]:
    """Cut tasks into the seed's splits, stratified by family; sets ``task.split``.

    One cursor walks a seeded cycle of the families across all three splits, taking
    one task of the next family that still has one, so a split at least as large as
    the number of families sees every family.
    """
    sizes = dict(zip(SPLITS, (covered_seen, uncovered_seen, unseen)))
    if any(size < 0 for size in sizes.values()):
        raise ValueError(f"split sizes must be >= 0, got {sizes}")
    if sum(sizes.values()) > len(tasks):
        raise ValueError(f"asked for {sum(sizes.values())} tasks ({sizes}) but only "
                         f"{len(tasks)} exist")
    rng = random.Random(f"split:{seed}")
    by_family: dict[str, list[Task]] = {}
    for task in sorted(tasks, key=lambda t: t.task_id):
        by_family.setdefault(task.family, []).append(task)
    for group in by_family.values():
        rng.shuffle(group)
    cycle = sorted(by_family)
    rng.shuffle(cycle)
    cursor, result = 0, {}
    for split, size in sizes.items():
        chosen: list[Task] = []
        while len(chosen) < size:
            group = by_family[cycle[cursor % len(cycle)]]
            cursor += 1
            if group:
                chosen.append(group.pop())
        for task in chosen:
            task.split = split
        result[split] = chosen
    return result


def continue_tasks(domain: AirlineDomain, seed: int, start: int, size: int,
                   families: Collection[str]) -> list[Task]:
    """``size`` more tasks of ``families``, generated after the ``start`` tasks of ``domain``.

    ``domain`` is ``generate_domain(seed, start)``'s. The generation carries on where it
    stopped — the same family schedule, the same record of entities each family used —
    so the first ``start`` tasks stay exactly as they are and the new ones prefer
    reservations and users no earlier task of their family used. Tasks of other families
    in the schedule are skipped; each kept task is verified like the domain's own.
    """
    wanted = set(families)
    unknown = wanted - set(FAMILY_NAMES)
    if unknown or not wanted:
        raise ValueError(f"unknown task families {sorted(unknown)}; known: {list(FAMILY_NAMES)}")
    horizon = start + (size + 1) * len(FAMILY_NAMES)  # holds `size` whole rounds: `size` of every family
    schedule = family_schedule(horizon, FAMILY_NAMES, seed)
    picked = [index for index in range(start, horizon) if schedule[index] in wanted][:size]
    if len(picked) < size:
        raise ValueError(f"only {len(picked)} of {size} scheduled tasks are of families {sorted(wanted)}")
    if not picked:
        return []
    tasks = generate_tasks(domain.data, seed, picked[-1] + 1)
    chosen = [tasks[index] for index in picked]
    for task in chosen:
        verify_gold(domain, task)
    return chosen
