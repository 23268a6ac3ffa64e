"""One generated assistant turn played on an environment: parse → execute → observation → Step.

The rollout engine and the veRL episode hand the policy's raw text to :func:`play_turn`,
the one entry point for a generated turn;
it parses the Hermes tool call (``agentgrpo.agent.format.parse_assistant``, never
raising) and plays the action with ``agentgrpo.envs.turn.apply_turn``, which owns the
one rule of what a turn records and what is an error. The dependency runs one way:
this (conversation-format) layer imports the environment layer, never the reverse.
"""
from __future__ import annotations

from collections.abc import Collection

from agentgrpo.agent.format import END_OF_TURN_MARKERS, ParsedAction, parse_assistant
from agentgrpo.envs.turn import TurnEnv, TurnOutcome, apply_turn
from agentgrpo.envs.types import INVALID


def play_turn(
    env: TurnEnv,
    text: str,
    tool_names: Collection[str],
    end_markers: Collection[str] = END_OF_TURN_MARKERS,
) -> tuple[ParsedAction, TurnOutcome]:
    """Parse ``text`` and play it on ``env``; returns the parse and the played turn.

    A malformed turn (bad JSON, unknown tool, two calls, ...) never reaches ``env``: its
    step is ``invalid`` with the parser's error as observation and the raw ``text``.
    ``end_markers``: trailing end-of-turn tokens to ignore; a caller holding a
    ``ChatFormat`` passes its ``end_markers`` (the defaults plus its template's own).
    """
    parsed = parse_assistant(text, tool_names, end_markers)
    return parsed, apply_turn(env, parsed.to_action(), recorded_text(parsed, text), parsed.error)


def recorded_text(parsed: ParsedAction, raw: str) -> str:
    """The text a turn's step records: a malformed turn's raw output, else the parsed free
    text (the reasoning before a call, or the message itself)."""
    return raw if parsed.kind == INVALID else parsed.text
