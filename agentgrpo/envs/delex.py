"""Delexicalisation: the policy sees each id as a slot token, the environment sees the id.

A policy that acts in worlds it has never seen must carry ids (a user, a reservation, a payment
method, a flight) from what the user and the tools said into its calls. Task-oriented dialogue
systems met unseen slot values the same way: replace each value by a placeholder on the way
in, the placeholder back by the value on the way out. Here every id the episode shows gets
the next free slot of its kind in order of first appearance (``nadia_jackson_6267`` →
``<U1>``, the reservations of a profile → ``<R1>``, ``<R2>``, ...), the same in every world,
so what a policy learns in its training worlds reads any other world; a tokenizer that holds
each slot as one token (``slot_tokens``) makes the copy a single token.

``DelexEnv`` wraps one episode's environment: the first message and every observation are
delexicalised, and a turn's action has its slots put back before the environment runs it, so
tools, the user simulator and the grader see real ids and the recorded steps (``Step``) hold the
policy's view. ``delexicalise_messages`` gives a recorded transcript (an oracle demonstration)
the same view: a replay of its delexicalised calls through ``DelexEnv`` sees the same
observations. An id beyond a kind's slots stays as it is; a slot the episode never filled is
sent as written, so the tool reports it unknown. Dates, times, amounts and names stay as they
are: they carry meaning the policy reasons with. Pure Python; no torch.
"""
from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agentgrpo.envs.types import Action, StepResult

_BOUNDARY_BEFORE = r"(?<![A-Za-z0-9_<])"
_BOUNDARY_AFTER = r"(?![A-Za-z0-9_>])"
MESSAGE_PROTOCOL_KEYS = frozenset({"role", "id", "tool_call_id", "name", "type"})
"""Message fields that are protocol, not text: a call's id (``call_1``) is never a value."""


@dataclass(frozen=True)
class IdKind:
    """One kind of id: its slot tag (``R`` gives ``<R1>``), the regex of a whole id, how many
    slots an episode has (ids after those stay literal), and the tool arguments whose values
    are ids of this kind (``reservation_id``; what ``rollout.copy_by_kind`` reads)."""

    tag: str
    pattern: str
    slots: int
    arguments: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Z]", self.tag):
            raise ValueError(f"IdKind.tag must be one capital letter, got {self.tag!r}")
        if self.slots < 1:
            raise ValueError(f"IdKind.slots must be >= 1, got {self.slots}")


def slot_token(tag: str, index: int) -> str:
    """The text of slot ``index`` (1-based) of kind ``tag``: ``<R3>``."""
    return f"<{tag}{index}>"


def slot_tokens(kinds: Sequence[IdKind]) -> list[str]:
    """Every slot's text, for a tokenizer that keeps each one as a single token."""
    return [slot_token(kind.tag, i) for kind in kinds for i in range(1, kind.slots + 1)]


class Delexicaliser:
    """One episode's id ↔ slot map. ``delex`` assigns slots to ids it meets for the first
    time (left to right); ``relex`` puts ids back. Kinds are tried in the order given, so a
    narrower pattern (a flight number) listed before a wider one (a reservation code) wins."""

    def __init__(self, kinds: Sequence[IdKind]):
        if not kinds:
            raise ValueError("Delexicaliser needs at least one IdKind")
        if len({kind.tag for kind in kinds}) != len(kinds):
            raise ValueError(f"IdKind tags must differ, got {[kind.tag for kind in kinds]}")
        self.kinds = {kind.tag: kind for kind in kinds}
        alternatives = "|".join(f"(?P<{kind.tag}>{kind.pattern})" for kind in kinds)
        self._ids = re.compile(f"{_BOUNDARY_BEFORE}(?:{alternatives}){_BOUNDARY_AFTER}")
        tags = "".join(self.kinds)
        self._slots = re.compile(rf"<([{tags}])([1-9][0-9]*)>")
        self.slot_of: dict[str, str] = {}
        self.value_of: dict[str, str] = {}
        self._used = dict.fromkeys(self.kinds, 0)

    def delex(self, text: str) -> str:
        """``text`` with every id replaced by its slot (a new one for an id not seen before)."""
        return self._ids.sub(self._slot_for, text)

    def relex(self, text: str) -> str:
        """``text`` with every filled slot replaced by its id; unknown slots are kept."""
        return self._slots.sub(lambda m: self.value_of.get(m.group(0), m.group(0)), text)

    def relex_action(self, action: Action) -> Action:
        """``action`` with its slots put back, in every string of its arguments."""
        if not isinstance(action.kwargs, dict):
            return action
        return Action(action.name, map_texts(action.kwargs, self.relex, fixed_keys=frozenset()))

    def _slot_for(self, match: re.Match[str]) -> str:
        value = match.group(0)
        if value in self.slot_of:
            return self.slot_of[value]
        tag = match.lastgroup
        assert tag is not None
        if self._used[tag] >= self.kinds[tag].slots:
            return value  # out of slots: the id stays as it is
        self._used[tag] += 1
        slot = slot_token(tag, self._used[tag])
        self.slot_of[value], self.value_of[slot] = slot, value
        return slot


class DelexEnv:
    """An episode's environment as a delexicalising policy sees it (see the module docstring).

    Everything else (``task``, ``domain``, ``done``, ``info``, ``reward``, ...) is the wrapped
    environment's."""

    def __init__(self, env: Any, kinds: Sequence[IdKind]):
        self.env = env
        self.names = Delexicaliser(kinds)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def reset(self) -> str:
        return self.names.delex(self.env.reset())

    def step(self, action: Action) -> StepResult:
        return self._view(self.env.step(self.names.relex_action(action)))

    def finish(self, termination: Any) -> StepResult:
        return self._view(self.env.finish(termination))

    def _view(self, result: StepResult) -> StepResult:
        return replace(result, observation=self.names.delex(result.observation))


def delexicalise_messages(messages: Iterable[dict[str, Any]], kinds: Sequence[IdKind],
                          names: Delexicaliser | None = None) -> list[dict[str, Any]]:
    """A recorded transcript (OpenAI- or chat-style messages) as a delexicalising policy sees
    it: every text, call arguments included, in message order through one ``Delexicaliser``
    (``names``, to read its slots afterwards; a new one if None); the system prompt (the policy,
    not the world) is left as it is. The input is not changed."""
    names = Delexicaliser(kinds) if names is None else names
    return [dict(m) if m.get("role") == "system" else map_texts(m, names.delex) for m in messages]


def renumber_slots(messages: Sequence[dict[str, Any]], kinds: Sequence[IdKind],
                   rng: random.Random) -> list[dict[str, Any]]:
    """A delexicalised transcript with each kind's slots renumbered by one random one-to-one
    map into that kind's slots (``<R1>, <R2>`` → ``<R9>, <R4>``), the same in every message.

    Slots are numbered in order of first appearance, so in every demonstration the first
    reservation listed is ``<R1>``: a policy lowers its loss by writing ``<R1>`` more than by
    reading which reservation the user named. Renumbered on every pass over a demonstration,
    no slot is likelier than another and the only way to predict one is to copy it from the
    context (one token: the copy a delexicalising tokenizer makes easy). The conversation means
    the same: slots are names with no order. The system prompt is left as it is; the input is
    not changed."""
    by_tag = {kind.tag: kind for kind in kinds}
    pattern = re.compile(rf"<([{''.join(by_tag)}])([1-9][0-9]*)>")
    used: dict[str, list[int]] = {tag: [] for tag in by_tag}

    def collect(text: str) -> str:
        for tag, index in pattern.findall(text):
            if int(index) not in used[tag] and int(index) <= by_tag[tag].slots:
                used[tag].append(int(index))
        return text

    world = [m for m in messages if m.get("role") != "system"]
    map_texts(world, collect)
    mapping = {slot_token(tag, old): slot_token(tag, new) for tag, olds in used.items()
               for old, new in zip(olds, rng.sample(range(1, by_tag[tag].slots + 1), len(olds)))}

    def renumber(text: str) -> str:
        return pattern.sub(lambda m: mapping.get(m.group(0), m.group(0)), text)

    return [dict(m) if m.get("role") == "system" else map_texts(m, renumber) for m in messages]


def map_texts(node: Any, fn: Callable[[str], str], key: str | None = None,
              fixed_keys: frozenset[str] = MESSAGE_PROTOCOL_KEYS) -> Any:
    """``node`` (messages, call arguments: nested dicts and lists) with ``fn`` applied to every
    text string, in order, except under ``fixed_keys`` (for messages, the protocol fields).
    A new structure: ``node`` is not changed."""
    if isinstance(node, str):
        return node if key in fixed_keys else fn(node)
    if isinstance(node, dict):
        return {k: map_texts(v, fn, k, fixed_keys) for k, v in node.items()}
    if isinstance(node, list):
        return [map_texts(v, fn, key, fixed_keys) for v in node]
    return node
