"""The toy domain's world: one tool, ``submit(key)``, a one-field state, exact-match grading.

The user states one key out of K; the agent must submit exactly that key with one call,
then tell the user. A learning check (``agentgrpo sanity``) needs a task that a very small
model learns in seconds and whose reward starts at a known chance level (1/K for an agent
that knows the call format but not which key), while still going through everything a
real domain does: a tool schema, an ``"Error: ..."`` observation for a bad call, a user
reply ending the episode, and grading by comparing the episode's state with the state the
task's gold actions produce (as airline compares database hashes).

:class:`ToyDomain` implements ``agentgrpo.envs.registry.ToolDomain``. No torch here.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgrpo.envs.types import RESPOND, Action, Task, error_observation, is_error_observation

KEYS: tuple[str, ...] = ("amber", "birch", "cedar", "delta", "ember", "fjord", "grove", "heron")
"""The keys a toy domain draws from (its first ``n_keys``)."""
SUBMIT = "submit"
"""The domain's only tool."""

POLICY = (
    "You are a key clerk. The user tells you a key. Submit exactly that key with the submit tool, "
    "once, then tell the user that it is done."
)


@dataclass
class ToyState:
    """One episode's state: the keys submitted so far, in order (at most one is accepted)."""

    submitted: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ToyGrade:
    """The outcome of one toy episode.

    reward: 1.0 iff the state equals the gold state (exactly the task's key was submitted).
    submitted / gold: the submitted keys of the episode and of the gold replay.
    """

    reward: float
    state_match: bool
    submitted: list[str]
    gold: list[str]


class ToyDomain:
    """K keys, the ``submit`` tool, the policy text and the tasks (``ToolDomain``).

    Args:
        n_keys: How many keys of ``KEYS`` are valid (2 to 8): chance is 1/n_keys.
        tasks: The tasks of this domain.
    """

    terminal_tools: frozenset[str] = frozenset()
    policy: str = POLICY

    def __init__(self, n_keys: int, tasks: Sequence[Task] = ()) -> None:
        if not 2 <= n_keys <= len(KEYS):
            raise ValueError(f"n_keys must be in [2, {len(KEYS)}], got {n_keys}")
        self.keys: tuple[str, ...] = KEYS[:n_keys]
        self.tasks: list[Task] = list(tasks)
        self.tool_names: frozenset[str] = frozenset({SUBMIT})

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The OpenAI function schema of ``submit`` (a fresh copy)."""
        return [{
            "type": "function",
            "function": {
                "name": SUBMIT,
                "description": "Submit the key the user stated. Only one key is accepted per conversation.",
                "parameters": {
                    "type": "object",
                    "properties": {"key": {"type": "string", "enum": list(self.keys),
                                           "description": "The user's key."}},
                    "required": ["key"],
                },
            },
        }]

    def task_by_id(self, task_id: str) -> Task:
        for task in self.tasks:
            if task.task_id == task_id:
                return task
        raise KeyError(task_id)

    # ---- episodes ------------------------------------------------------------------
    def new_state(self) -> ToyState:
        return ToyState()

    def execute(self, state: ToyState, name: Any, kwargs: Any) -> str:
        """Run one call on ``state``; every failure is an ``"Error: ..."`` observation and leaves it unchanged."""
        if name != SUBMIT:
            return error_observation(f"unknown tool {str(name)[:60]!r}. Available tools: {SUBMIT}.")
        if not isinstance(kwargs, dict) or set(kwargs) != {"key"}:
            shown = sorted(kwargs) if isinstance(kwargs, dict) else type(kwargs).__name__
            return error_observation(f"invalid arguments for {SUBMIT}: expected exactly {{'key'}}, got {shown}.")
        key = kwargs["key"]
        if key not in self.keys:
            return error_observation(f"unknown key {str(key)[:60]!r}; valid keys: {', '.join(self.keys)}.")
        if state.submitted:
            return error_observation("a key was already submitted in this conversation.")
        state.submitted.append(key)
        return f"Key {key} submitted."

    is_error = staticmethod(is_error_observation)

    def replay(self, actions: Iterable[Action]) -> ToyState:
        """A fresh state after ``actions`` (messages skipped)."""
        state = self.new_state()
        for action in actions:
            if action.name != RESPOND:
                self.execute(state, action.name, action.kwargs)
        return state

    # ---- grading -------------------------------------------------------------------
    def grade(self, state: ToyState, task: Task, replies: Iterable[Any] = ()) -> ToyGrade:
        """1 iff the episode's state equals the gold replay's (replies are not graded here)."""
        gold = self.replay(task.actions).submitted
        match = state.submitted == gold
        return ToyGrade(1.0 if match else 0.0, match, list(state.submitted), gold)

    def reward(self, state: ToyState, task: Task, replies: Iterable[Any] = ()) -> float:
        return self.grade(state, task, replies).reward
