"""Grading for the airline domain: canonical hashes, the gold-hash cache, the reward.

τ-bench grades an episode by hashing the whole database after it, replaying the
task's gold actions on a freshly loaded copy, hashing that, and comparing; the agent
must also have said every required output string. We keep exactly that rule, but
make it cheap enough for RL (thousands of episodes):

* The database hash is a *multiset hash*: the sum, modulo 2**256, of one SHA-256
  digest per record, where a record is identified by ``(table, key)`` and digested
  in a canonical form. Because the sum is over records, a state that overlays a few
  changed records on an immutable base only re-digests those records
  (:mod:`agentgrpo.envs.airline.core.db`). Equal databases give equal hashes; a
  collision between different databases needs a SHA-256 collision or a subset-sum
  relation between 256-bit digests, which random edits do not produce.
* The canonical form is sorted-key compact JSON, which is type-sensitive
  (``250`` and ``250.0`` differ, as do ``1`` and ``true``) and ignores key order.
* The gold hash depends only on the base data, the compatibility mode and the gold
  actions, so it is computed once per task and cached (:class:`GoldHashCache`).

:func:`naive_hash` is the reference: one SHA-256 over the canonical JSON of the
whole database, what τ-bench does. Tests check that both hashes induce the same
equality between states.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from agentgrpo.envs.types import RESPOND, Action, GradeResult

HASH_MODULUS = 1 << 256
"""The multiset hash is a sum of 256-bit digests modulo this."""


def canonical_json(value: Any) -> str:
    """Sorted-key, compact, ASCII JSON: the canonical text of a JSON value.

    Type-sensitive (``250`` → ``250``, ``250.0`` → ``250.0``, ``True`` → ``true``);
    independent of dict key order; ASCII-only so any Python string encodes.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def naive_hash(data: Mapping[str, Any]) -> str:
    """Reference hash: SHA-256 of the canonical JSON of the whole database."""
    return hashlib.sha256(canonical_json(data).encode("ascii")).hexdigest()


def record_digest(table: str, key: str, record: Any) -> int:
    """256-bit digest of one record, bound to its table and key."""
    payload = canonical_json([table, key, record]).encode("ascii")
    return int.from_bytes(hashlib.sha256(payload).digest(), "big")


def format_hash(total: int) -> str:
    """Hex text of a multiset sum (64 characters)."""
    return f"{total % HASH_MODULUS:064x}"


def multiset_hash(data: Mapping[str, Mapping[str, Any]]) -> str:
    """Multiset hash of a plain database, computed from scratch over every record.

    The incremental hash of a state must equal this on its materialized data.
    """
    total = sum(
        record_digest(table, key, record)
        for table, records in data.items()
        for key, record in records.items()
    )
    return format_hash(total)


def find_outputs(outputs: Iterable[str], replies: Iterable[Any]) -> dict[str, bool]:
    """Which required outputs appear in some reply (τ-bench's rule).

    Case-insensitive; commas are removed from the reply (not from the output), so
    "1,786" in a reply matches the output "1786".
    """
    texts = [r.lower().replace(",", "") for r in replies if isinstance(r, str)]
    return {out: any(out.lower() in text for text in texts) for out in outputs}


def grade_episode(
    db_hash: str, gold_hash: str, outputs: Sequence[str], replies: Iterable[Any]
) -> GradeResult:
    """Combine the database comparison and the output check into a GradeResult."""
    found = find_outputs(outputs, replies)
    db_match = db_hash == gold_hash
    reward = 1.0 if db_match and all(found.values()) else 0.0
    return GradeResult(reward, db_match, found, db_hash, gold_hash)


def gold_replay_actions(actions: Iterable[Action], terminal_tools: Iterable[str]) -> list[Action]:
    """The gold actions τ-bench replays: all but messages and terminating tools."""
    skipped = set(terminal_tools) | {RESPOND}
    return [a for a in actions if a.name not in skipped]


class GoldHashCache:
    """Gold database hash per distinct gold-action list, computed once.

    Keyed by the canonical JSON of the actions (not by task id), so two task
    objects with the same gold actions share an entry and a task whose actions are
    edited gets a fresh one.
    """

    def __init__(self, compute: Callable[[Sequence[Action]], str]) -> None:
        self._compute = compute
        self._hashes: dict[str, str] = {}

    @staticmethod
    def fingerprint(actions: Sequence[Action]) -> str:
        as_json = [[a.name, a.kwargs] for a in actions]
        return json.dumps(as_json, sort_keys=True, separators=(",", ":"), default=repr)

    def get(self, actions: Sequence[Action]) -> str:
        key = self.fingerprint(actions)
        cached = self._hashes.get(key)
        if cached is None:
            cached = self._hashes[key] = self._compute(actions)
        return cached

    def __len__(self) -> int:
        return len(self._hashes)
