"""Import an upstream τ-bench checkout into the directory our loader reads (``tau_bench.py``).

``import_tau_bench(PATH, OUT)`` reads, from a clone of sierra-research/tau-bench (PATH is
its root or its ``tau_bench/envs/airline`` directory):

* ``data/users.json``, ``data/flights.json``, ``data/reservations.json`` — copied;
* ``wiki.md`` (the airline policy) — copied as ``policy.md``;
* ``tasks_test.py`` — parsed with ``ast`` (never imported or executed): the list assigned
  to ``TASKS``, each ``Task(user_id=..., instruction=..., actions=[Action(name=...,
  kwargs={...})], outputs=[...])`` with literal values, written as ``tasks_test.json``;
* the checkout's ``LICENSE`` (MIT), which travels with the data.

Nothing of τ-bench is part of this package: the user imports it from their own clone.
"""
from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path
from typing import Any

from agentgrpo.config import DataError, MissingFileError

AIRLINE_SUBDIR = Path("tau_bench") / "envs" / "airline"
DATA_FILES = ("users.json", "flights.json", "reservations.json")
TASK_FIELDS = ("user_id", "instruction", "actions", "outputs")


def find_airline_dir(path: str | Path) -> Path:
    """The airline directory of a checkout (``PATH/tau_bench/envs/airline``, or PATH itself)."""
    root = Path(path)
    for candidate in (root / AIRLINE_SUBDIR, root):
        if (candidate / "tasks_test.py").is_file() and (candidate / "data").is_dir():
            return candidate
    raise MissingFileError(f"{root} is not a τ-bench checkout: found no {AIRLINE_SUBDIR}/tasks_test.py with a data/ "
                           "directory; clone https://github.com/sierra-research/tau-bench and pass its root")


def parse_tasks(source: str, filename: str = "tasks_test.py") -> list[dict[str, Any]]:
    """The task records of a τ-bench tasks module, read from its syntax tree (nothing is executed)."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as e:
        raise DataError(f"{filename}: not valid Python ({e.msg}, line {e.lineno})") from None
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id in ("TASKS", "tasks") for t in targets):
            if not isinstance(node.value, ast.List):
                raise DataError(f"{filename}:{node.lineno}: TASKS is not a list literal")
            return [_task(element, filename) for element in node.value.elts]
    raise DataError(f"{filename}: no `TASKS = [...]` list found")


def _task(node: ast.expr, filename: str) -> dict[str, Any]:
    where = f"{filename}:{getattr(node, 'lineno', '?')}"
    if isinstance(node, ast.Dict):
        record = _literal(node, where)
    elif isinstance(node, ast.Call) and _name(node.func) == "Task" and not node.args:
        record = {kw.arg: _actions(kw.value, where) if kw.arg == "actions" else _literal(kw.value, where)
                  for kw in node.keywords if kw.arg is not None}
    else:
        raise DataError(f"{where}: a task must be Task(field=value, ...) with keyword arguments or a dict")
    missing = [f for f in TASK_FIELDS if f not in record]
    if missing:
        raise DataError(f"{where}: the task has no {', '.join(missing)}")
    if not isinstance(record["user_id"], str) or not isinstance(record["instruction"], str):
        raise DataError(f"{where}: user_id and instruction must be strings")
    if not isinstance(record["outputs"], list) or not all(isinstance(o, str) for o in record["outputs"]):
        raise DataError(f"{where}: outputs must be a list of strings")
    actions = record["actions"]
    if not isinstance(actions, list) or not all(isinstance(a, dict) and isinstance(a.get("name"), str)
                                                and isinstance(a.get("kwargs", {}), dict) for a in actions):
        raise DataError(f"{where}: actions must be a list of Action(name=str, kwargs={{...}})")
    return {field: record[field] for field in TASK_FIELDS}


def _actions(node: ast.expr, where: str) -> list[dict[str, Any]]:
    if not isinstance(node, ast.List):
        return _literal(node, where)
    actions = []
    for element in node.elts:
        if isinstance(element, ast.Call) and _name(element.func) == "Action" and not element.args:
            action = {kw.arg: _literal(kw.value, where) for kw in element.keywords if kw.arg is not None}
            actions.append({"name": action.get("name"), "kwargs": action.get("kwargs", {})})
        else:
            actions.append(_literal(element, where))
    return actions


def _literal(node: ast.expr, where: str) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        raise DataError(f"{where}: a value that is not a literal ({ast.dump(node)[:80]}...); only literals are "
                        "read, nothing is executed") from None


def _name(func: ast.expr) -> str | None:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def import_tau_bench(path: str | Path, out: str | Path) -> dict[str, Any]:
    """Write the checkout's airline data, policy and test tasks into ``out``; returns what was written."""
    airline = find_airline_dir(path)
    sources = [airline / "data" / name for name in DATA_FILES] + [airline / "wiki.md"]
    missing = [str(p) for p in sources if not p.is_file()]
    if missing:
        raise MissingFileError(f"the τ-bench checkout at {path} lacks {', '.join(missing)}")
    tasks = parse_tasks((airline / "tasks_test.py").read_text(encoding="utf-8"), str(airline / "tasks_test.py"))
    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    for name in DATA_FILES:
        shutil.copyfile(airline / "data" / name, target / name)
    shutil.copyfile(airline / "wiki.md", target / "policy.md")
    (target / "tasks_test.json").write_text(json.dumps(tasks, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    roots = [Path(path)] + ([airline.parents[2]] if airline.parent.name == "envs" else [])
    license_file = next((root / "LICENSE" for root in roots if (root / "LICENSE").is_file()), None)
    if license_file is not None:
        shutil.copyfile(license_file, target / "LICENSE")
    return {"out": str(target), "tasks": len(tasks), "license": str(license_file) if license_file else None}
