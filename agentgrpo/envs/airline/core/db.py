"""Database state for the airline domain: immutable base + copy-on-write overlay.

The database has three tables (``users``, ``flights``, ``reservations``), each a
mapping from key to a JSON record, in τ-bench's JSON format. An episode must start
from a fresh database, and τ-bench reloads ~5 MB of JSON for that. Here:

* :class:`BaseDB` holds the loaded data once, never modified, with the multiset
  hash of every record computed once (lazily, on the first ``db_hash``).
* :class:`AirlineState` is one episode's database: the base plus an overlay of the
  records the episode wrote. ``new_state`` is O(1); ``db_hash`` is O(touched
  records); ``materialize`` returns a full plain-dict copy (tests, export).
* Writes happen only inside :meth:`AirlineState.transaction`: ``mutable`` hands
  out a private deep copy in a pending layer that is merged into the overlay when
  the block ends normally and dropped when it raises. A failed tool call therefore
  cannot leave a partial change, whatever the tool did before failing.
* :class:`DictState` is the naive reference with the same interface: a full deep
  copy edited in place (with an undo journal for transactions), hashed with the
  full canonical hash. Tests run the same tool code on both and compare.

Records returned by ``get``/``items`` may be shared with the base or the overlay:
read them, never mutate them (``mutable`` is the only way to write).

The module also holds the data-model facts that tools and generators share: table
names, the simulated clock, the new-id sequences, the fees and τ-bench's airports.
"""
from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

from agentgrpo.envs.airline.core.grader import format_hash, naive_hash, record_digest

TABLES = ("users", "flights", "reservations")
"""The tables of an airline database, in τ-bench's order."""

# ---- facts of the τ-bench data model ---------------------------------------------
# The simulated clock (τ-bench's "now") is the only notion of time in the domain.
NOW_DATE = "2024-05-15"
NOW_TIME = "15:00:00"
NOW_ISO = f"{NOW_DATE}T{NOW_TIME}"
"""Creation time stamped on new reservations (τ-bench: 2024-05-15 15:00 EST)."""
TIMEZONE = "EST"
NOW = _dt.datetime.fromisoformat(NOW_ISO)

TAU_BENCH_AIRPORTS: dict[str, str] = {
    "SFO": "San Francisco", "JFK": "New York", "LAX": "Los Angeles", "ORD": "Chicago",
    "DFW": "Dallas", "DEN": "Denver", "SEA": "Seattle", "ATL": "Atlanta", "MIA": "Miami",
    "BOS": "Boston", "PHX": "Phoenix", "IAH": "Houston", "LAS": "Las Vegas",
    "MCO": "Orlando", "EWR": "Newark", "CLT": "Charlotte", "MSP": "Minneapolis",
    "DTW": "Detroit", "PHL": "Philadelphia", "LGA": "LaGuardia",
}
"""The airports ``list_all_airports`` reports for τ-bench data (a fixed list there)."""

CERTIFICATE_IDS = ("certificate_3221322", "certificate_3221323", "certificate_3221324")
NEW_RESERVATION_IDS = ("HATHAT", "HATHAU", "HATHAV")
INSURANCE_PRICE = 30
"""Dollars per passenger."""
BAG_PRICE = 50
"""Dollars per non-free bag."""


_MISSING = object()


def copy_json(value: Any) -> Any:
    """Deep copy of a JSON value (dicts, lists, scalars); faster than copy.deepcopy."""
    if isinstance(value, dict):
        return {k: copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_json(v) for v in value]
    return value


class Store(Protocol):
    """What the tools need from a database state (implemented by both states)."""

    def get(self, table: str, key: str) -> Any | None: ...
    def has(self, table: str, key: str) -> bool: ...
    def items(self, table: str) -> Iterator[tuple[str, Any]]: ...
    def mutable(self, table: str, key: str) -> Any: ...
    def put(self, table: str, key: str, record: Any) -> None: ...
    def transaction(self) -> Any: ...
    def db_hash(self) -> str: ...
    def materialize(self) -> dict[str, dict[str, Any]]: ...


class BaseDB:
    """The loaded database, shared read-only by every state built on it."""

    def __init__(self, data: Mapping[str, Mapping[str, Any]]) -> None:
        missing = [t for t in TABLES if not isinstance(data.get(t), dict)]
        if missing:
            raise ValueError(f"airline data needs tables {list(TABLES)}; missing or not a dict: {missing}")
        self.tables: dict[str, dict[str, Any]] = {t: data[t] for t in TABLES}
        self._digests: dict[str, dict[str, int]] | None = None
        self._total: int | None = None

    def _compute_digests(self) -> None:
        self._digests = {
            table: {key: record_digest(table, key, rec) for key, rec in records.items()}
            for table, records in self.tables.items()
        }
        self._total = sum(sum(d.values()) for d in self._digests.values())

    def digest(self, table: str, key: str) -> int:
        """Digest of one base record (all digests are computed on first use)."""
        if self._digests is None:
            self._compute_digests()
        return self._digests[table][key]  # type: ignore[index]

    @property
    def total(self) -> int:
        """Sum of all base record digests (the base's multiset hash, unreduced)."""
        if self._total is None:
            self._compute_digests()
        return self._total  # type: ignore[return-value]

    def verify(self) -> bool:
        """Re-digest every base record and compare: detects accidental in-place edits."""
        if self._digests is None:
            return True
        return all(
            record_digest(table, key, rec) == self._digests[table][key]
            for table, records in self.tables.items()
            for key, rec in records.items()
        )


class AirlineState:
    """One episode's database: the shared base plus a copy-on-write overlay."""

    __slots__ = ("_base", "_overlay", "_pending", "_digest_cache")

    def __init__(self, base: BaseDB) -> None:
        self._base = base
        self._overlay: dict[str, dict[str, Any]] = {}
        self._pending: dict[str, dict[str, Any]] | None = None
        self._digest_cache: dict[tuple[str, str], int] = {}

    # ---- reads -------------------------------------------------------------------
    def get(self, table: str, key: str) -> Any | None:
        """The current record, or None. Read-only: use ``mutable`` to write."""
        if self._pending is not None and key in self._pending.get(table, ()):
            return self._pending[table][key]
        overlay = self._overlay.get(table)
        if overlay is not None and key in overlay:
            return overlay[key]
        return self._base.tables[table].get(key)

    def has(self, table: str, key: str) -> bool:
        return self.get(table, key) is not None

    def items(self, table: str) -> Iterator[tuple[str, Any]]:
        """All (key, record) pairs: base order first, then inserted keys in order."""
        base = self._base.tables[table]
        layers = [self._overlay.get(table, {})]
        if self._pending is not None:
            layers.append(self._pending.get(table, {}))
        if not any(layers):
            yield from base.items()
            return
        for key, record in base.items():
            for layer in reversed(layers):
                if key in layer:
                    record = layer[key]
                    break
            yield key, record
        seen: set[str] = set()
        for layer in layers:
            for key in layer:
                if key not in base and key not in seen:
                    seen.add(key)
                    yield key, self.get(table, key)

    def keys(self, table: str) -> list[str]:
        return [key for key, _ in self.items(table)]

    # ---- writes ------------------------------------------------------------------
    def _require_transaction(self) -> dict[str, dict[str, Any]]:
        if self._pending is None:
            raise RuntimeError("database writes must happen inside state.transaction()")
        return self._pending

    def mutable(self, table: str, key: str) -> Any:
        """A private, writable copy of a record for the current transaction."""
        pending = self._require_transaction().setdefault(table, {})
        if key in pending:
            return pending[key]
        current = self.get(table, key)
        if current is None:
            raise KeyError(key)
        pending[key] = copy = copy_json(current)
        return copy

    def put(self, table: str, key: str, record: Any) -> None:
        """Insert or replace a record (the state takes ownership of ``record``)."""
        self._require_transaction().setdefault(table, {})[key] = record

    @contextmanager
    def transaction(self) -> Iterator[AirlineState]:
        """Writes inside the block are kept if it ends normally, dropped if it raises."""
        if self._pending is not None:
            raise RuntimeError("transactions do not nest")
        self._pending = {}
        try:
            yield self
        except BaseException:
            self._pending = None
            raise
        pending, self._pending = self._pending, None
        for table, records in pending.items():
            overlay = self._overlay.setdefault(table, {})
            for key, record in records.items():
                overlay[key] = record
                self._digest_cache.pop((table, key), None)

    # ---- hashing and export ------------------------------------------------------
    def db_hash(self) -> str:
        """Multiset hash of the committed database, re-digesting only overlay records."""
        total = self._base.total
        for table, records in self._overlay.items():
            base = self._base.tables[table]
            for key, record in records.items():
                digest = self._digest_cache.get((table, key))
                if digest is None:
                    digest = self._digest_cache[(table, key)] = record_digest(table, key, record)
                if key in base:
                    total -= self._base.digest(table, key)
                total += digest
        return format_hash(total)

    @property
    def num_touched(self) -> int:
        """How many records the overlay holds (changed or inserted)."""
        return sum(len(records) for records in self._overlay.values())

    def materialize(self) -> dict[str, dict[str, Any]]:
        """A full plain-dict deep copy of the current database."""
        return {table: {k: copy_json(v) for k, v in self.items(table)} for table in TABLES}


class DictState:
    """Naive reference state: a full deep copy, edited in place, hashed in full.

    Same interface as :class:`AirlineState`. Transactions keep an undo journal
    (a deep copy of each record before its first change) and restore it on error.
    """

    def __init__(self, data: Mapping[str, Mapping[str, Any]]) -> None:
        self._data: dict[str, dict[str, Any]] = {t: copy_json(dict(data[t])) for t in TABLES}
        self._journal: dict[tuple[str, str], Any] | None = None

    def get(self, table: str, key: str) -> Any | None:
        return self._data[table].get(key)

    def has(self, table: str, key: str) -> bool:
        return key in self._data[table]

    def items(self, table: str) -> Iterator[tuple[str, Any]]:
        return iter(list(self._data[table].items()))

    def keys(self, table: str) -> list[str]:
        return list(self._data[table])

    def _remember(self, table: str, key: str) -> None:
        if self._journal is None:
            raise RuntimeError("database writes must happen inside state.transaction()")
        if (table, key) not in self._journal:
            previous = self._data[table].get(key, _MISSING)
            self._journal[(table, key)] = copy_json(previous) if previous is not _MISSING else _MISSING

    def mutable(self, table: str, key: str) -> Any:
        if key not in self._data[table]:
            raise KeyError(key)
        self._remember(table, key)
        return self._data[table][key]

    def put(self, table: str, key: str, record: Any) -> None:
        self._remember(table, key)
        self._data[table][key] = record

    @contextmanager
    def transaction(self) -> Iterator[DictState]:
        if self._journal is not None:
            raise RuntimeError("transactions do not nest")
        self._journal = {}
        try:
            yield self
        except BaseException:
            for (table, key), previous in self._journal.items():
                if previous is _MISSING:
                    self._data[table].pop(key, None)
                else:
                    self._data[table][key] = previous
            raise
        finally:
            self._journal = None

    def db_hash(self) -> str:
        return naive_hash(self._data)

    def materialize(self) -> dict[str, dict[str, Any]]:
        return copy_json(self._data)
