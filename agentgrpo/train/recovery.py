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
* ``malformed``: the call's text with its closing tag missing (an unclosed block);
* ``declined`` (not among the defaults): the message to the user before the write (in the
  airline, the confirmation request) with one number in it changed (an amount, a date, a count),
  which the user declines, restating the request;
* ``policy`` (not among the defaults; DAgger-style, Ross et al., 2011): the first turn where a
  trained policy, shown the demonstration's own prefix, does not make the oracle's call
  (``first_slip``): its wrong call or its malformed turn, played as it wrote it. The oracle then
  labels the state the policy itself reaches, not one drawn from a list of faults. A slip that is
  a message to the user (where the oracle calls) is not played: the user would answer it, and the
  oracle's plan has no answer to that; a wrong write that runs changes the database and the
  replay is dropped.

The error (or the user's "no") comes back, and the oracle's own turn follows: the recovery. The
wrong turn stays in the transcript as context and is left out of the loss
(``Demonstration.untrained``); every other turn, the recovery included, is trained as usual. A
replay is kept only when, the wrong turn and its answer taken out, it is the plain demonstration
turn for turn and ends in success (the scripted user never sees a tool call, and answers a
declined request without changing what it later says); otherwise the plain one is kept. A
policy's wrong call may also be one that runs without changing anything (a read of another
reservation, a search): its answer stays in the context.
"""
from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agentgrpo.agent.chat import ChatFormat, ToolSignature, policy_view
from agentgrpo.agent.format import TOOL_CALL_CLOSE, parse_assistant, render_assistant
from agentgrpo.envs.delex import Delexicaliser, IdKind, delexicalise_messages, map_texts
from agentgrpo.envs.types import Action, is_error_observation

TOOL_FAULTS = ("misnamed", "incomplete", "malformed")
"""Faults of a tool call (the defaults of ``data.recovery_faults``)."""
RECOVERY_FAULTS = (*TOOL_FAULTS, "declined", "policy")
_NUMBER = re.compile(r"\d+")


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
    if kind not in TOOL_FAULTS:
        raise ValueError(f"unknown fault of a call {kind!r}; expected one of {TOOL_FAULTS}")
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


def wrong_message(text: str, rng: random.Random) -> str | None:
    """``text`` (a message to the user) with one of its numbers, at random, changed by 1 to 3 up
    or down (a width kept, so a date stays shaped like one); None when it holds no number."""
    numbers = list(_NUMBER.finditer(text))
    if not numbers:
        return None
    match = rng.choice(numbers)
    value = int(match.group()) + rng.choice((-3, -2, -1, 1, 2, 3))
    value = value if value >= 0 else int(match.group()) + 1
    return text[:match.start()] + str(value).zfill(len(match.group())) + text[match.end():]


class RecoveringOracle:
    """``oracle`` with its move at agent turn ``turn`` (0-based) first made wrong once, as ``kind``
    says (``wrong_call`` for a call, ``wrong_message`` for ``declined``, ``given`` for ``policy``:
    a policy's slip, ``first_slip``), then made as it makes it.

    ``act``/``last_text``/``last_error`` as ``agentgrpo.envs.episode.Agent``. What answers the wrong
    turn (an error, the user's "no") never reaches ``oracle``: its plan gets the answer to its own
    move, as in the plain episode. ``fault`` is the wrong turn played (None if the move at ``turn``
    was not of the kind ``kind`` needs: a call, or for ``declined`` a message with a number)."""

    def __init__(self, oracle: Any, turn: int, kind: str, signatures: Mapping[str, ToolSignature],
                 rng: random.Random, given: WrongCall | None = None) -> None:
        if (kind == "policy") != (given is not None):
            raise ValueError("a policy fault is played as given, and only a policy fault is given")
        self.oracle, self.turn, self.kind, self.given = oracle, turn, kind, given
        self.signatures, self.rng = signatures, rng
        self.last_text = ""
        self.last_error: str | None = None
        self.fault: WrongCall | None = None
        self._turns = 0
        self._held: tuple[Action, str] | None = None

    def act(self, observation: str) -> Action:
        self.last_error = None
        turn, self._turns = self._turns, self._turns + 1
        if self._held is not None:  # the oracle's own move, after its wrong version was rejected
            (action, self.last_text), self._held = self._held, None
            return action
        action = self.oracle.act(observation)
        text = getattr(self.oracle, "last_text", "") or ""
        self.last_text = text
        if turn != self.turn:
            return action
        self.fault = self._wrong(action, text)
        if self.fault is None:
            return action
        self._held = (action, text)
        self.last_text, self.last_error = self.fault.text, self.fault.error
        return self.fault.action

    def _wrong(self, action: Action, text: str) -> WrongCall | None:
        if self.kind == "policy":
            return self.given
        if self.kind != "declined":
            return None if action.is_respond else wrong_call(self.kind, action, text, self.signatures, self.rng)
        wrong = wrong_message(action.content, self.rng) if action.is_respond else None
        return None if wrong is None else WrongCall("declined", Action.respond(wrong), wrong)


def fault_call(actions: Sequence[Action], write_tools: Collection[str], rng: random.Random) -> int | None:
    """Which of an episode's tool calls (0-based over the calls of ``actions``) a fault goes
    before: one of its write calls at random, any call where it has none; None without calls."""
    calls = [a for a in actions if not a.is_respond]
    writes = [i for i, a in enumerate(calls) if a.name in write_tools]
    candidates = writes or list(range(len(calls)))
    return rng.choice(candidates) if candidates else None


def fault_turn(actions: Sequence[Action], call: int, kind: str) -> int | None:
    """The agent turn (0-based over ``actions``) a ``kind`` fault goes at, before tool call number
    ``call``: that call's own turn, or for ``declined`` the last message to the user before it
    (None if there is none)."""
    turns = [t for t, a in enumerate(actions) if not a.is_respond]
    if kind != "declined":
        return turns[call]
    return next((t for t in range(turns[call] - 1, -1, -1) if actions[t].is_respond), None)


def assistant_message_index(messages: Sequence[Mapping[str, Any]], turn: int) -> int:
    """The index in ``messages`` of the assistant message of ``turn`` (0-based agent turns)."""
    indices = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    return indices[turn]


def _shown(message: Mapping[str, Any]) -> tuple[Any, ...]:
    """A message as the policy reads it, call ids aside (they number the turns)."""
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message.get("tool_calls") or []]
    return message.get("role"), message.get("content"), calls


def is_recovery_of(replay: Sequence[Mapping[str, Any]], index: int, plain: Sequence[Mapping[str, Any]],
                   writes: Collection[str] | None = None) -> bool:
    """Whether ``replay`` is ``plain`` with one wrong turn (at ``index``) and its answer put in, a
    call's answer an error (the call rejected, the database untouched). With ``writes`` (the tools
    that change the database), a call to any other tool may also have run."""
    if not 0 <= index < len(replay) - 1:
        return False
    answer = replay[index + 1]
    calls = replay[index].get("tool_calls") or []
    harmless = writes is not None and bool(calls) and all(c["function"]["name"] not in writes for c in calls)
    if answer.get("role") == "tool" and not harmless and not is_error_observation(str(answer.get("content"))):
        return False
    rest = [*replay[:index], *replay[index + 2:]]
    return len(rest) == len(plain) and all(_shown(a) == _shown(b) for a, b in zip(rest, plain))


SlipOutcome = Literal["none", "message", "call", "malformed"]


@dataclass(frozen=True)
class Slip:
    """Where a policy first leaves an oracle demonstration (``first_slip``).

    ``turn``: the agent turn (0-based; the last one when ``outcome`` is ``none``). ``outcome``:
    ``none`` (every call the oracle's, and a message wherever the oracle wrote one), ``message``
    (a message where the oracle calls: not played), ``call`` (another call, or the same tool with
    other arguments) or ``malformed``. ``fault``: the wrong turn to play (``call`` and ``malformed``),
    in the real world's ids."""

    turn: int
    outcome: SlipOutcome
    fault: WrongCall | None = None


def first_slip(messages: Sequence[Mapping[str, Any]], chat: ChatFormat, next_turn: Callable[[list[Any]], str],
               kinds: Sequence[IdKind] | None = None) -> Slip:
    """The first turn of an oracle demonstration (``messages``, in the real world's ids) where the
    policy, shown the demonstration up to that turn as it sees it (its system prompt; with
    ``kinds``, ids as slots), does not do what the oracle did. ``next_turn(prefix)`` is the
    policy's text after a prefix of that view (``greedy_turns``). Two messages always agree: the
    wording of one is not a decision this can read; a call agrees when the tool and every argument
    are the oracle's (the reason before it may differ). A slip's call is put back in the world's
    ids (slots the policy names that the prefix never filled stay as written, as in an episode)."""
    shown = delexicalise_messages(messages, kinds) if kinds else list(messages)
    view = policy_view(chat, shown)
    offset = len(view) - len(messages)  # policy_view puts its own system message first
    turn = -1
    for index, message in enumerate(view):
        if message["role"] != "assistant":
            continue
        turn += 1
        gold, got = chat.parse(message["content"]), chat.parse(next_turn(view[:index]))
        if got.kind == "respond" and gold.kind == "respond":
            continue
        if got.kind == "tool" and gold.kind == "tool" and (got.name, got.arguments) == (gold.name, gold.arguments):
            continue
        if got.kind == "respond":
            return Slip(turn, "message")
        relex = _relexicaliser(messages[: index - offset], kinds)
        if got.kind == "invalid":  # never reaches the environment: the parser's error answers it
            return Slip(turn, "malformed", WrongCall("policy", Action.respond(""), relex(got.text), got.error))
        action = Action(got.name, map_texts(dict(got.arguments), relex, fixed_keys=frozenset()))
        return Slip(turn, "call", WrongCall("policy", action, relex(got.text)))
    return Slip(turn, "none")


def _relexicaliser(prefix: Sequence[Mapping[str, Any]], kinds: Sequence[IdKind] | None) -> Callable[[str], str]:
    """Puts back the ids of the slots ``prefix`` filled (as ``delexicalise_messages`` fills them)."""
    if not kinds:
        return lambda text: text
    names = Delexicaliser(kinds)
    delexicalise_messages(prefix, kinds, names)
    return names.relex


class PolicySlips:
    """``first_slip`` of one policy, counted by outcome (``counts``): ``data.recovery_faults``'
    ``policy`` fault."""

    def __init__(self, chat: ChatFormat, next_turn: Callable[[list[Any]], str],
                 kinds: Sequence[IdKind] | None = None) -> None:
        self.chat, self.next_turn, self.kinds = chat, next_turn, kinds
        self.counts: Counter[str] = Counter()

    def __call__(self, messages: Sequence[Mapping[str, Any]]) -> Slip:
        slip = first_slip(messages, self.chat, self.next_turn, self.kinds)
        self.counts[slip.outcome] += 1
        return slip


def greedy_turns(model: Any, chat: ChatFormat, max_new_tokens: int = 256,
                 use_autocast: Any = True) -> Callable[[list[Any]], str]:
    """``next_turn`` for ``first_slip``: ``model``'s greedy turn after a prefix of the policy's view."""
    from agentgrpo.policy.generate import GenerationRequest, generate_batch  # torch: only where a model decodes

    def next_turn(prefix: list[Any]) -> str:
        request = GenerationRequest(chat.encode_prompt(prefix), max_new_tokens, list(chat.eos_token_ids),
                                    temperature=0.0)
        return chat.decode(generate_batch(model, [request], chat.pad_token_id, use_autocast=use_autocast)[0].tokens)

    return next_turn
