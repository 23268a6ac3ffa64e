"""Domain-agnostic environment types: actions, tasks, grades, step results and steps.

These are the small dataclasses the environment layer exchanges with the agent,
rollout and evaluation layers. No torch here (environment code never imports it), and
no import from the layers above: they import these.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

RESPOND = "respond"
"""Action name for a message to the user; its kwargs are ``{"content": str}``."""

INVALID = "invalid"
"""Step kind and name of a malformed turn (it never reaches the environment)."""

USER_STOP = "###STOP###"
"""Token the user simulator emits to end the conversation."""

ERROR_PREFIX = "Error: "
"""Prefix of every observation that reports a failed tool call (τ-bench's convention)."""

StepKind = Literal["tool", "respond", "invalid"]
Termination = Literal["user_stop", "transfer", "max_turns", "token_budget", "aborted", "running"]
"""How an episode ended; ``aborted``: a request to a server (the LLM user) failed for good,
so the episode has no grade and a NaN reward (evaluation and training leave it out)."""
ABORTED = "aborted"
CUT_OFF: frozenset[str] = frozenset({"max_turns", "token_budget"})
"""Endings imposed from outside (the agent's turn or token budget ran out). τ-bench scores such an
episode 0: its agent loop keeps the reward of the last step, which is 0 unless the episode ended by
itself (the user's ``###STOP###`` or a transfer). A policy that stalls until the cap must not be
graded on the database it left, or doing nothing scores every task that needs no change."""


def error_observation(reason: str) -> str:
    """The observation of a failed turn: ``"Error: <reason>"``. Every error the environment
    shows the policy (a tool's failure, a malformed turn) is written by this function."""
    return f"{ERROR_PREFIX}{reason}"


def is_error_observation(observation: str) -> bool:
    """Whether an observation reports a failure: it starts with ``"Error: "`` exactly.

    The one rule for our own episodes: the environment writes every error with
    :func:`error_observation`, and a turn's ``Step.error`` records this rule's verdict.
    (Transcripts from elsewhere may be looser: ``agentgrpo.rewards.messages.looks_like_error_text``.)
    """
    return observation.startswith(ERROR_PREFIX)


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

    @property
    def content(self) -> str:
        """The text of a ``respond`` action (``""`` if missing, ``str()`` of a non-string)."""
        content = self.kwargs.get("content", "") if isinstance(self.kwargs, dict) else ""
        return content if isinstance(content, str) else str(content)

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


@dataclass(frozen=True)
class GradeResult:
    """The outcome of grading one episode, τ-bench's way (database hash and required outputs).

    reward: 1.0 iff ``db_match`` and every output was found, else 0.0.
    db_match: the episode's database hash equals the gold hash.
    outputs_found: for each required output, whether some reply contained it.
    db_hash / gold_hash: the two hashes compared.
    """

    reward: float
    db_match: bool
    outputs_found: dict[str, bool] = field(default_factory=dict)
    db_hash: str = ""
    gold_hash: str = ""


@dataclass
class StepResult:
    """What ``env.step(action)`` returns."""

    observation: str
    done: bool
    reward: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Step:
    """One agent action and its outcome (PRM-Lite and the evaluator read these).

    kind: ``tool`` (a well-formed call, even to a tool that then errored),
        ``respond`` (a message to the user), ``invalid`` (a malformed generation:
        bad JSON, unknown tool, two calls, call and message together...).
    name: tool name, ``"respond"``, or ``"invalid"``.
    arguments: tool arguments (``{"content": text}`` for respond; ``{}`` if invalid).
    observation: tool output, the user's reply, or the error shown to the policy.
    text: the assistant's free text around the call (its visible reasoning).
    error: the turn was malformed (invalid) or the tool failed. Left out (``None``), it is
        decided once, at construction, by the environment's rule: ``invalid``, or a tool
        call whose observation ``is_error_observation``. It is a bool from then on, and
        every reader (the error rate, PRM-Lite) takes this record as it is.
    """

    kind: StepKind
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    observation: str = ""
    text: str = ""
    error: bool | None = None

    def __post_init__(self) -> None:
        if self.error is None:
            self.error = self.kind == INVALID or (
                self.kind == "tool" and is_error_observation(self.observation))

    @property
    def is_think(self) -> bool:
        return self.kind == "tool" and self.name == "think"

    @property
    def is_tool(self) -> bool:
        return self.kind == "tool"
