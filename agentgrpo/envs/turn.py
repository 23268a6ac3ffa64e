"""One agent turn against an environment: action → observation → ``Step``.

Every driver of episodes (the batched rollout engine, the veRL episode, ``run_episode``)
plays a turn through :func:`apply_turn`, so there is one rule for what a turn records
and what counts as an error:

* a **malformed** turn (``action=None``: bad tool-call syntax, an unknown tool,
  arguments that are not an object) never reaches the environment. Its observation is
  ``"Error: <why>"`` (:func:`~agentgrpo.envs.types.error_observation`) and its step is
  ``invalid`` with ``error=True``;
* a **message** to the user (``respond``) goes to the environment, which answers with the
  user's reply; it is never an error;
* a **tool call** goes to the environment; it is an error iff the observation starts with
  ``"Error: "`` (:func:`~agentgrpo.envs.types.is_error_observation`).

Turning the assistant's output into an ``Action`` is the caller's parser's job (text:
``agentgrpo.agent.turn.play_turn``; structured actions: :func:`action_error`): this
layer knows nothing of chat formats. Turn limits are the caller's too, since a
malformed turn does not count as an environment step.
"""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from agentgrpo.envs.types import (
    INVALID,
    RESPOND,
    Action,
    Step,
    StepResult,
    error_observation,
    is_error_observation,
)

_MAX_QUOTED = 60  # characters of a bad tool name echoed back in an error


class TurnEnv(Protocol):
    """What a turn needs from an environment (``AirlineEnv`` satisfies it)."""

    def step(self, action: Action) -> StepResult: ...


@dataclass
class TurnOutcome:
    """One played turn.

    step: the turn as recorded (kind, name, arguments, observation, text, error).
    result: what the environment returned; ``None`` when the turn never reached it.
    """

    step: Step
    result: StepResult | None

    @property
    def done(self) -> bool:
        """The environment ended the episode on this turn (never for a malformed turn)."""
        return self.result is not None and self.result.done

    @property
    def reply_role(self) -> str:
        """Who answers the turn in a chat transcript: the ``user`` after a message, else ``tool``."""
        return "user" if self.step.kind == "respond" else "tool"


def apply_turn(env: TurnEnv, action: Action | None, text: str = "", error: str | None = None) -> TurnOutcome:
    """Play one agent turn on ``env`` and record it as a :class:`Step`.

    Args:
        env: The episode's environment.
        action: The turn's action; ``None`` for a malformed turn, which never reaches ``env``.
        text: The assistant's free text: its reasoning before a call, or the raw output
            of a malformed turn. A message's text is its content.
        error: Why a malformed turn is malformed (shown as ``"Error: <error>"``).
    """
    if action is None:
        observation = error_observation(error or "malformed turn.")
        return TurnOutcome(Step(INVALID, INVALID, {}, observation, text=text, error=True), None)
    result = env.step(action)
    if action.is_respond:
        content = action.content
        return TurnOutcome(Step(RESPOND, RESPOND, {"content": content}, result.observation, text=content), result)
    arguments = dict(action.kwargs)
    error_seen = is_error_observation(result.observation)
    return TurnOutcome(Step("tool", action.name, arguments, result.observation, text=text, error=error_seen), result)


def action_error(action: Action, tool_names: Collection[str]) -> str | None:
    """Why a structured action is malformed, or ``None`` if ``apply_turn`` may send it.

    For agents that act with ``Action`` objects rather than text: a message is always
    well formed; a tool call needs a known tool name and object arguments.
    """
    if action.is_respond:
        return None
    name = action.name
    if not isinstance(name, str) or name not in tool_names:
        shown = name if isinstance(name, str) else type(name).__name__
        shown = shown if len(shown) <= _MAX_QUOTED else shown[:_MAX_QUOTED] + "..."
        return f"unknown tool {shown!r}. Available tools: {', '.join(sorted(tool_names))}."
    if not isinstance(action.kwargs, dict):
        return f'"arguments" of {name} must be a JSON object, got {type(action.kwargs).__name__}.'
    return None
