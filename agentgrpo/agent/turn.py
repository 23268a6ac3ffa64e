"""One generated assistant turn played on an environment: parse → execute → observation → Step.

The rollout engine and the veRL episode hand the policy's raw text to :func:`play_turn`;
it parses the Hermes tool call (``agentgrpo.agent.format.parse_assistant``, never
raising) and plays the action with ``agentgrpo.envs.turn.apply_turn``, which owns the
one rule of what a turn records and what is an error. The dependency runs one way:
this (conversation-format) layer imports the environment layer, never the reverse.
"""
from __future__ import annotations

from collections.abc import Collection

from agentgrpo.agent.format import ParsedAction, parse_assistant
from agentgrpo.envs.turn import TurnEnv, TurnOutcome, apply_turn
from agentgrpo.envs.types import INVALID


def play_turn(env: TurnEnv, text: str, tool_names: Collection[str]) -> tuple[ParsedAction, TurnOutcome]:
    """Parse ``text`` and play it on ``env``; returns the parse and the played turn.

    A malformed turn (bad JSON, unknown tool, two calls, ...) never reaches ``env``: its
    step is ``invalid`` with the parser's error as observation and the raw ``text``.
    """
    parsed = parse_assistant(text, tool_names)
    reasoning = text if parsed.kind == INVALID else parsed.text
    return parsed, apply_turn(env, parsed.to_action(), reasoning, parsed.error)
