"""Recovery demonstrations: the oracle's episodes with one of its calls first made wrong.

The oracle never makes a call the environment rejects, so its demonstrations never show what
to do after one; a policy trained on them does not recover (``eval --writes``: "After a
rejected write call"). As in DART (Laskey et al., 2017: disturb the expert, keep its labels),
``data.recovery_share`` of the demonstrations are played again with one fault injected before
one of the oracle's write calls (any call in an episode without one), a fault of the kind a
small policy makes and the environment rejects, so the database is untouched:

* ``misnamed``: the call's arguments under another tool's name, one that does not take exactly
  those arguments (a flight search sent as ``book_reservation``);
* ``incomplete``: the call with a strict subset of its arguments (a flight change with only the
  reservation id); a call with fewer than two arguments is misnamed instead;
* ``malformed``: the call's text with its closing tag missing (an unclosed block).

The error comes back, and the oracle's own call follows: the recovery. The wrong turn stays in
the transcript as context and is left out of the loss (``Demonstration.untrained``); every other
turn, the recovery included, is trained as usual. The scripted user never sees a tool call, so
the episode after the fault is the plain one's; a replay that does not end in success, or whose
fault was not rejected, keeps the plain demonstration.
"""
from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentgrpo.agent.format import TOOL_CALL_CLOSE, parse_assistant, render_assistant
from agentgrpo.envs.types import Action, Step

RECOVERY_FAULTS = ("misnamed", "incomplete", "malformed")


@dataclass(frozen=True)
class ToolSignature:
    """What a tool's argument check accepts: its parameters, and the ones it requires."""

    parameters: frozenset[str]
    required: frozenset[str]

    def rejects(self, arguments: Collection[str]) -> bool:
        """Whether a call with these argument names fails the check (an argument the tool does not
        take, or one it requires missing)."""
        names = set(arguments)
        return not names <= self.parameters or not self.required <= names


def tool_signatures(schemas: Sequence[Mapping[str, Any]]) -> dict[str, ToolSignature]:
    """Each tool's ``ToolSignature``, read from its JSON schema (``{"function": ...}`` or flat)."""
    signatures = {}
    for schema in schemas:
        function = schema.get("function", schema)
        parameters = function.get("parameters", {})
        signatures[function["name"]] = ToolSignature(frozenset(parameters.get("properties", {})),
                                                     frozenset(parameters.get("required", ())))
    return signatures


@dataclass(frozen=True)
class WrongCall:
    """The fault played in place of the oracle's call: an action, its text, and for a malformed
    turn the parser's error (the action then never reaches the environment)."""

    kind: str
    action: Action
    text: str
    error: str | None = None


def wrong_call(kind: str, action: Action, text: str, signatures: Mapping[str, ToolSignature],
               rng: random.Random) -> WrongCall:
    """``action`` (the oracle's call, with ``text`` its reason) made wrong in the way ``kind``
    names (``RECOVERY_FAULTS``), so that the tools' argument check or the parser rejects it."""
    if kind not in RECOVERY_FAULTS:
        raise ValueError(f"unknown fault {kind!r}; expected one of {RECOVERY_FAULTS}")
    arguments = dict(action.kwargs)
    required = [k for k in arguments if k in signatures[action.name].required] if action.name in signatures else []
    if kind == "incomplete" and len(arguments) >= 2 and required:
        missing = rng.choice(required)  # an argument it requires goes, so the check rejects the call
        rest = [k for k in arguments if k != missing]
        kept = [k for k in rest if rng.random() < 0.5] or [rng.choice(rest)]  # and at least one stays
        return WrongCall(kind, Action(action.name, {k: arguments[k] for k in kept}), text)
    if kind in ("incomplete", "misnamed"):
        others = sorted(name for name, signature in signatures.items()
                        if name != action.name and signature.rejects(arguments))
        if others:
            return WrongCall("misnamed", Action(rng.choice(others), arguments), text)
    raw = render_assistant(text, action.name, arguments)
    raw = raw[: raw.rindex(TOOL_CALL_CLOSE)].rstrip()
    error = parse_assistant(raw, signatures).error
    return WrongCall("malformed", action, raw, error or "malformed turn.")


class RecoveringOracle:
    """``oracle`` with its call number ``call`` (0-based over its tool calls) first made wrong once,
    as ``kind`` says (``wrong_call``), then made as the oracle makes it.

    ``act``/``last_text``/``last_error`` as ``agentgrpo.envs.episode.Agent``. The fault's
    observation (the error) never reaches ``oracle``: its plan gets the observation of its own
    call, as in the plain episode. ``fault_turn`` is the turn (0-based) the fault was played at."""

    def __init__(self, oracle: Any, call: int, kind: str, signatures: Mapping[str, ToolSignature],
                 rng: random.Random) -> None:
        self.oracle, self.call, self.kind = oracle, call, kind
        self.signatures, self.rng = signatures, rng
        self.last_text = ""
        self.last_error: str | None = None
        self.fault: WrongCall | None = None
        self.fault_turn: int | None = None
        self._calls = self._turns = 0
        self._held: tuple[Action, str] | None = None

    def act(self, observation: str) -> Action:
        self.last_error = None
        self._turns += 1
        if self._held is not None:  # the oracle's own call, after its fault was rejected
            (action, self.last_text), self._held = self._held, None
            return action
        action = self.oracle.act(observation)
        text = getattr(self.oracle, "last_text", "") or ""
        if action.is_respond:
            self.last_text = text
            return action
        self._calls += 1
        if self._calls - 1 != self.call:
            self.last_text = text
            return action
        self.fault = wrong_call(self.kind, action, text, self.signatures, self.rng)
        self.fault_turn, self._held = self._turns - 1, (action, text)
        self.last_text, self.last_error = self.fault.text, self.fault.error
        return self.fault.action


def fault_call(actions: Sequence[Action], write_tools: Collection[str], rng: random.Random) -> int | None:
    """Which of an episode's tool calls (0-based over the calls of ``actions``) a fault goes
    before: one of its write calls at random, any call where it has none; None without calls."""
    calls = [a for a in actions if not a.is_respond]
    writes = [i for i, a in enumerate(calls) if a.name in write_tools]
    candidates = writes or list(range(len(calls)))
    return rng.choice(candidates) if candidates else None


def fault_rejected(steps: Sequence[Step], turn: int) -> bool:
    """Whether the fault played at ``turn`` came back as an error (the database untouched)."""
    return 0 <= turn < len(steps) and bool(steps[turn].error)


def assistant_message_index(messages: Sequence[Mapping[str, Any]], turn: int) -> int:
    """The index in ``messages`` of the assistant message of ``turn`` (0-based agent turns)."""
    indices = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    return indices[turn]
