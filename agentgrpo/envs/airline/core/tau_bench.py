"""Load a τ-bench-format airline directory into an :class:`AirlineDomain`.

The directory holds ``users.json``, ``flights.json`` and ``reservations.json`` (the
database), ``policy.md`` (or τ-bench's ``wiki.md``) and the tasks as a JSON list of
``{"user_id", "instruction", "actions": [{"name", "kwargs"}], "outputs"}`` records
in ``tasks_test.json`` (or ``tasks.json``). τ-bench's data is MIT-licensed and is
read from where it lies, never copied into this project.

Task ids are the positions in the file (``"0"`` … ``"49"``), as τ-bench indexes
its tasks, unless a record carries its own ``task_id``.
"""
from __future__ import annotations

import json
from os import PathLike
from pathlib import Path
from typing import Any

from agentgrpo.config import DataError, MissingFileError
from agentgrpo.envs.airline.core.db import TABLES
from agentgrpo.envs.airline.core.domain import AirlineDomain
from agentgrpo.envs.airline.core.tool_base import Compat
from agentgrpo.envs.types import Action, Task

POLICY_FILES = ("policy.md", "wiki.md")
TASK_FILES = (("tasks_test.json", "test"), ("tasks.json", None))


def _read_json(path: Path) -> Any:
    try:
        with path.open(encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not valid JSON ({e}); restore the file from the τ-bench release") from e


def task_from_record(record: dict[str, Any], index: int, split: str | None) -> Task:
    """A :class:`Task` from one τ-bench task record."""
    actions = [Action(a["name"], dict(a.get("kwargs", {}))) for a in record.get("actions", [])]
    return Task(
        task_id=str(record.get("task_id", index)),
        user_id=record["user_id"],
        instruction=record.get("instruction", ""),
        actions=actions,
        outputs=[str(o) for o in record.get("outputs", [])],
        family="tau_bench",
        split=split,
    )


def load_tasks(directory: Path) -> list[Task]:
    """The tasks of a τ-bench directory (empty if it has no task file)."""
    for name, split in TASK_FILES:
        path = directory / name
        if path.is_file():
            records = _read_json(path)
            return [task_from_record(r, i, split) for i, r in enumerate(records)]
    return []


def load_policy(directory: Path) -> str:
    for name in POLICY_FILES:
        path = directory / name
        if path.is_file():
            return path.read_text(encoding="utf-8")
    raise FileNotFoundError(f"no policy file ({' or '.join(POLICY_FILES)}) in {directory}")


def missing_files(path: str | PathLike[str]) -> list[str]:
    """What a τ-bench airline directory lacks of the data, the policy and a tasks file ([] if complete)."""
    directory = Path(path)
    wanted = [(f"{table}.json",) for table in TABLES] + [POLICY_FILES, tuple(name for name, _ in TASK_FILES)]
    return [" or ".join(names) for names in wanted if not any((directory / n).is_file() for n in names)]


def check_tau_bench_dir(path: str | PathLike[str] | None, what: str = "τ-bench airline directory") -> Path:
    """``path`` as a complete τ-bench directory, or a MissingFileError naming what is missing.

    ``what`` starts the message: the config key or flag that gave the path (``"env.data_dir:"``).
    """
    layout = "users.json, flights.json, reservations.json, policy.md and tasks_test.json"
    if not path or not Path(path).is_dir():
        raise MissingFileError(f"{what} {str(path)!r} does not exist; point it at τ-bench's airline data "
                               f"(a directory with {layout})")
    missing = missing_files(path)
    if missing:
        raise MissingFileError(f"{what} {path} has no {', no '.join(missing)}; a τ-bench airline directory "
                               f"holds {layout}")
    return Path(path)


def load_tau_bench(path: str | PathLike[str], compat: Compat = "tau_bench") -> AirlineDomain:
    """Load a τ-bench airline directory (data, policy, tasks) as a domain."""
    directory = check_tau_bench_dir(path)
    data = {table: _read_json(directory / f"{table}.json") for table in TABLES}
    # The freshly parsed data belongs to nobody else, so the domain can own it.
    return AirlineDomain(data, load_tasks(directory), load_policy(directory), compat, copy_data=False)
