"""Builders for PRM-Lite tests: short readable constructors of agent steps.

Imported by the test modules of this package (``from .prm_helpers import ...``).
"""
from __future__ import annotations

import itertools

from agentgrpo.envs.types import Step

TEXT = "Let me check that in the system for you now."
"""Assistant text of 30..100 characters: neither terse (P7) nor a think step."""
assert 30 <= len(TEXT) <= 100

LONG_TEXT = (
    "The user wants to cancel; policy says I must check the reservation first, "
    "then confirm the refund method before calling any write tool."
)
"""Over 100 characters: makes any step a think step."""
assert len(LONG_TEXT) > 100


def tool(name: str, text: str = TEXT, obs: str = '{"ok": true}', error: bool | None = None,
         **arguments) -> Step:
    """A tool call; ``error`` defaults to whether ``obs`` starts with ``Error:``."""
    if error is None:
        error = obs.startswith("Error:")
    return Step(kind="tool", name=name, arguments=arguments, observation=obs, text=text,
                error=error)


def respond(content: str = TEXT, reply: str = "Okay.") -> Step:
    """A message to the user; ``reply`` is the user's answer (the observation)."""
    return Step(kind="respond", name="respond", arguments={"content": content},
                observation=reply, text=content)


def think(thought: str = "Check the policy before acting.") -> Step:
    return Step(kind="tool", name="think", arguments={"thought": thought}, observation="",
                text="")


def invalid(text: str = TEXT) -> Step:
    return Step(kind="invalid", name="invalid", arguments={}, text=text,
                observation="Error: malformed tool call", error=True)


_fresh = itertools.count()


def calc_text(text: str) -> Step:
    """A ``calculate`` call with the given assistant text and a never-repeated expression
    (so P3 cannot fire): for rules that only look at the text."""
    return tool("calculate", text=text, expression=f"{next(_fresh)} + 1")
