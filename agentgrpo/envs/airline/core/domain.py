"""The airline domain: base data, tools, policy, tasks and grading in one object.

:class:`AirlineDomain` is what the environment, the generators and the trainer use::

    state = domain.new_state()                      # fresh database, O(1)
    obs = domain.execute(state, name, kwargs)       # one tool call -> observation
    result = domain.grade(state, task, replies)     # GradeResult; .reward in {0, 1}

``execute`` is the boundary where nothing may escape: the arguments are validated
against the generated schema, the tool runs inside a transaction on the state, and
any failure (bad arguments, a refusal, an exception inside the tool, an
unserialisable result) becomes an ``"Error: ..."`` observation with the
transaction discarded, so the database is exactly as before the call.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentgrpo.envs.airline.core.db import TAU_BENCH_AIRPORTS, AirlineState, BaseDB, DictState, Store, copy_json
from agentgrpo.envs.airline.core.grader import (
    GoldHashCache,
    GradeResult,
    gold_replay_actions,
    grade_episode,
)
from agentgrpo.envs.airline.core.schema import ArgumentError, ExtraFields, validate_arguments
from agentgrpo.envs.airline.core.tool_base import Compat, ToolError
from agentgrpo.envs.airline.core.tools import TOOL_KINDS, TOOL_SCHEMAS, AirlineTools
from agentgrpo.envs.types import Action, Task, error_observation, is_error_observation

COMPAT_MODES: tuple[str, ...] = ("tau_bench", "fixed")
EXTRA_FIELDS: dict[str, ExtraFields] = {"tau_bench": "keep", "fixed": "reject"}
"""Unknown fields inside nested arguments (a flight, a passenger, a payment): τ-bench keeps
them, as it stores the caller's dicts; ``fixed`` rejects them (the schema is the contract)."""


def _short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else type(value).__name__
    return text if len(text) <= limit else text[:limit] + "..."


def _exception_text(exc: BaseException) -> str:
    """τ-bench shows ``str(e)``; fall back to the exception's name when that is empty."""
    text = str(exc)
    return text if text else type(exc).__name__


class AirlineDomain:
    """One airline world (base data + tasks + policy) under one compatibility mode.

    Args:
        data: ``{"users": ..., "flights": ..., "reservations": ...}`` in τ-bench's
            JSON format. Copied unless ``copy_data=False`` (then the domain owns it);
            never modified afterwards.
        tasks: The tasks of this world.
        policy: The policy text (wiki) shown to the agent.
        compat: ``"tau_bench"`` keeps τ-bench's quirks, ``"fixed"`` applies
            τ²-bench's fixes (see docs/environment.md).
        airports: IATA code → city for ``list_all_airports`` (default: τ-bench's 20).
    """

    tool_names: frozenset[str] = frozenset(TOOL_KINDS)
    write_tools: frozenset[str] = frozenset(n for n, k in TOOL_KINDS.items() if k == "write")
    read_tools: frozenset[str] = frozenset(n for n, k in TOOL_KINDS.items() if k == "read")
    terminal_tools: frozenset[str] = frozenset(n for n, k in TOOL_KINDS.items() if k == "terminal")

    def __init__(
        self,
        data: Mapping[str, Any],
        tasks: Sequence[Task],
        policy: str,
        compat: Compat = "tau_bench",
        *,
        airports: Mapping[str, str] | None = None,
        copy_data: bool = True,
    ) -> None:
        if compat not in COMPAT_MODES:
            raise ValueError(f"compat must be one of {COMPAT_MODES}, got {compat!r}")
        self._base = BaseDB(copy_json(dict(data)) if copy_data else data)
        self.tasks: list[Task] = list(tasks)
        self.policy = policy
        self.compat: Compat = compat
        self.airports: dict[str, str] = dict(TAU_BENCH_AIRPORTS if airports is None else airports)
        self._gold = GoldHashCache(self._compute_gold_hash)

    # ---- data and tools ------------------------------------------------------------
    @property
    def data(self) -> dict[str, dict[str, Any]]:
        """The base data (read-only: edit a state, never this)."""
        return self._base.tables

    @property
    def base(self) -> BaseDB:
        return self._base

    def tool_schemas(self) -> list[dict[str, Any]]:
        """OpenAI function-calling schemas of the 14 tools (fresh copies)."""
        return [copy_json(schema) for schema in TOOL_SCHEMAS.values()]

    def task_by_id(self, task_id: str) -> Task:
        for task in self.tasks:
            if task.task_id == task_id:
                return task
        raise KeyError(task_id)

    # ---- episodes ------------------------------------------------------------------
    def new_state(self) -> AirlineState:
        """A fresh database for one episode: the base with an empty overlay."""
        return AirlineState(self._base)

    def copied_state(self) -> DictState:
        """The naive reference database: a full deep copy of the data, hashed in full (τ-bench's
        way). Same interface as ``new_state``'s; the overlay is checked and measured against it."""
        return DictState(self.data)

    def execute(self, state: Store, name: Any, kwargs: Any) -> str:
        """Run one tool call on ``state`` and return the observation; never raises."""
        if not isinstance(name, str) or name not in TOOL_KINDS:
            return error_observation(f"unknown tool '{_short(name)}'")
        try:
            parameters = TOOL_SCHEMAS[name]["function"]["parameters"]
            args = validate_arguments(parameters, kwargs, EXTRA_FIELDS[self.compat])
        except ArgumentError as exc:
            return error_observation(f"invalid arguments for {name}: {exc}")
        except Exception as exc:  # malformed beyond what validation anticipates
            return error_observation(f"invalid arguments for {name}: {_exception_text(exc)}")
        method = getattr(AirlineTools(state, self.compat, self.airports), name)
        try:
            if TOOL_KINDS[name] == "write":
                with state.transaction():
                    return self._render(method(**args))
            # Reads run outside a transaction, where any write attempt raises.
            return self._render(method(**args))
        except ToolError as exc:
            return error_observation(str(exc))
        except Exception as exc:
            return error_observation(_exception_text(exc))

    @staticmethod
    def _render(result: Any) -> str:
        return result if isinstance(result, str) else json.dumps(result)

    is_error = staticmethod(is_error_observation)
    """Whether an observation reports a failed call (``agentgrpo.envs.types.is_error_observation``)."""

    def replay(self, actions: Iterable[Action], state: Store | None = None) -> tuple[Store, list[str]]:
        """Run actions (messages and terminating tools skipped) on a state.

        Returns the state (a fresh one unless given) and the observations.
        """
        state = self.new_state() if state is None else state
        observations = [
            self.execute(state, action.name, action.kwargs)
            for action in gold_replay_actions(actions, self.terminal_tools)
        ]
        return state, observations

    # ---- grading -------------------------------------------------------------------
    def _compute_gold_hash(self, actions: Sequence[Action]) -> str:
        state, _ = self.replay(actions)
        return state.db_hash()

    def gold_hash(self, task: Task) -> str:
        """Hash of the database after the task's gold actions (cached per action list)."""
        return self._gold.get(task.actions)

    def grade(self, state: Store, task: Task, replies: Iterable[Any]) -> GradeResult:
        """τ-bench's rule: database equals the gold one AND every output was said."""
        return grade_episode(state.db_hash(), self.gold_hash(task), task.outputs, replies)

    def reward(self, state: Store, task: Task, replies: Iterable[Any]) -> float:
        return self.grade(state, task, replies).reward
