"""Domain-agnostic environment types: actions, tasks and step results.

These are the small dataclasses the environment layer exchanges with the agent,
rollout and evaluation layers. No torch here (environment code never imports it).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

RESPOND = "respond"
"""Action name for a message to the user; its kwargs are ``{"content": str}``."""

USER_STOP = "###STOP###"
"""Token the user simulator emits to end the conversation."""


@dataclass(frozen=True)
class Action:
    """One agent action: a tool call (``name`` = tool name) or ``respond``."""

    name: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def respond(cls, content: str) -> Action:
        return cls(RESPOND, {"content": content})

    @property
    def is_respond(self) -> bool:
        return self.name == RESPOND

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kwargs": self.kwargs}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Action:
        return cls(d["name"], dict(d.get("kwargs", {})))


@dataclass
class Task:
    """A task: who the user is, what they want, and how success is graded.

    ``actions`` are the gold actions whose replay on a fresh database defines the
    target state; ``outputs`` are strings that must appear in some agent reply.
    ``scenario`` is the structured goal the scripted user follows (generated tasks
    only; τ-bench tasks carry just the natural-language ``instruction``).
    """

    task_id: str
    user_id: str
    instruction: str
    actions: list[Action]
    outputs: list[str] = field(default_factory=list)
    family: str = "tau_bench"
    split: str | None = None
    scenario: Any = None

    def to_dict(self) -> dict[str, Any]:
        scenario = self.scenario.to_dict() if hasattr(self.scenario, "to_dict") else self.scenario
        return {
            "task_id": self.task_id,
            "user_id": self.user_id,
            "instruction": self.instruction,
            "actions": [a.to_dict() for a in self.actions],
            "outputs": list(self.outputs),
            "family": self.family,
            "split": self.split,
            "scenario": scenario,
        }


@dataclass
class StepResult:
    """What ``env.step(action)`` returns."""

    observation: str
    done: bool
    reward: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)
