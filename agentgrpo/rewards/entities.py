"""Schema-based entities: placeholder detection, argument checks, observation scanning.

PRM-Lite never matches free substrings. An *entity* is a string of a known shape
(user id, reservation id, payment id, flight number, airport, date; see
``entity_schemas`` in prm_lite.yaml). Entities are read two ways:

- from tool-call arguments, by argument name at any nesting depth
  (``flights[].flight_number``, ``payment_methods[].payment_id``, ``passengers[].dob``);
  a value of a governed argument that does not fit its schema is *schema-invalid*;
- from observations (tool outputs and user messages), as whole tokens matching a
  schema, which is what the data-chain rules (B2/B3) compare arguments against.

A *placeholder* is a string value that, as a whole, is a stand-in keyword
(``unknown``, ``TBD``, ``<user_id>``, ``your_id``, ``...``) or is empty.
"""
from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentgrpo.rewards.config import EntitySchema

Entity = tuple[str, str]
"""(entity type, value), e.g. ``("reservation_id", "ZFA04Y")``."""

_WORD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_TOKEN_EDGE_BEFORE = r"(?<![A-Za-z0-9_])"
_TOKEN_EDGE_AFTER = r"(?![A-Za-z0-9_])"


@dataclass
class ArgumentReport:
    """bad: paths of placeholder/schema-invalid values; entities: well-formed ones."""

    bad: list[str] = field(default_factory=list)
    entities: list[Entity] = field(default_factory=list)


def occurs_as_token(value: str, text: str) -> bool:
    """Whether ``value`` appears in ``text`` with no word character (``[A-Za-z0-9_]``)
    glued to either side: ``"ZFA04Y"`` in ``'"ZFA04Y",'`` but not in ``"XZFA04Y"``."""
    start = text.find(value)
    while start != -1:
        end = start + len(value)
        before_ok = start == 0 or text[start - 1] not in _WORD_CHARS
        if before_ok and (end == len(text) or text[end] not in _WORD_CHARS):
            return True
        start = text.find(value, start + 1)
    return False


def _is_calendar_date(value: str) -> bool:
    """A real ISO date (``calendar: true`` schemas use YYYY-MM-DD)."""
    try:
        dt.date.fromisoformat(value)
    except ValueError:
        return False
    return True


class EntityMatcher:
    """Compiled placeholder and schema checks for one configuration."""

    def __init__(self, schemas: Mapping[str, EntitySchema], placeholder_keywords: Iterable[str],
                 placeholder_patterns: Iterable[str]) -> None:
        self._keywords = frozenset(k.strip().lower() for k in placeholder_keywords)
        patterns = [f"(?:{p})" for p in placeholder_patterns]
        self._placeholder_re = re.compile("|".join(patterns), re.IGNORECASE) if patterns else None
        self._full: dict[str, re.Pattern[str]] = {}
        self._scan: dict[str, re.Pattern[str]] = {}
        self._calendar: set[str] = set()
        self._type_of_argument: dict[str, str] = {}
        for etype, schema in schemas.items():
            self._full[etype] = re.compile(schema.pattern)
            self._scan[etype] = re.compile(_TOKEN_EDGE_BEFORE + f"(?:{schema.pattern})"
                                           + _TOKEN_EDGE_AFTER)
            if schema.calendar:
                self._calendar.add(etype)
            for argument in schema.arguments:
                self._type_of_argument[argument] = etype

    def type_of_argument(self, argument: str) -> str | None:
        return self._type_of_argument.get(argument)

    def is_placeholder(self, value: str) -> bool:
        """Whole-value placeholder test (case-insensitive; blank counts)."""
        stripped = value.strip()
        if not stripped or stripped.lower() in self._keywords:
            return True
        return bool(self._placeholder_re and self._placeholder_re.fullmatch(stripped))

    def fits(self, etype: str, value: Any) -> bool:
        """Whether ``value`` is a well-formed entity of type ``etype``."""
        if not isinstance(value, str) or not self._full[etype].fullmatch(value):
            return False
        return etype not in self._calendar or _is_calendar_date(value)

    def _walk(self, key: str, value: Any, path: str) -> Iterator[tuple[str, str, Any]]:
        """Yield (path, governing argument name, value) for every leaf value."""
        if isinstance(value, (str, int, float)) or value is None:
            yield path, key, value
        elif isinstance(value, Mapping):
            for k, v in value.items():
                yield from self._walk(str(k), v, f"{path}.{k}" if path else str(k))
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                yield from self._walk(key, item, f"{path}[{i}]")
        else:
            yield path, key, value

    def inspect_arguments(self, arguments: Mapping[str, Any]) -> ArgumentReport:
        """One pass over the arguments: bad values and well-formed entities."""
        report = ArgumentReport()
        for path, key, value in self._walk("", arguments, ""):
            etype = self._type_of_argument.get(key)
            if isinstance(value, str) and self.is_placeholder(value):
                report.bad.append(path)
            elif etype is not None:
                if self.fits(etype, value):
                    report.entities.append((etype, value))
                else:
                    report.bad.append(path)
        return report

    def bad_arguments(self, arguments: Mapping[str, Any]) -> list[str]:
        """Paths of placeholder or schema-invalid values, e.g. ``["flights[0].date"]``."""
        return self.inspect_arguments(arguments).bad

    def argument_entities(self, arguments: Mapping[str, Any]) -> list[Entity]:
        """Well-formed entities among the arguments (by governing argument name)."""
        return self.inspect_arguments(arguments).entities

    def extract(self, text: str) -> set[Entity]:
        """Entities appearing as whole tokens in an observation.

        The engine does not scan observations (too slow on long tool outputs); it asks
        ``occurs_as_token`` for each argument entity instead. For an entity that fits
        its schema the two agree: it is in ``extract(text)`` iff it occurs as a token.
        """
        found: set[Entity] = set()
        if not text:
            return found
        for etype, pattern in self._scan.items():
            for match in pattern.finditer(text):
                value = match.group(0)
                if etype not in self._calendar or _is_calendar_date(value):
                    found.add((etype, value))
        return found
