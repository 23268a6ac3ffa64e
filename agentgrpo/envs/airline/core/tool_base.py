"""What every airline tool shares: the compatibility mode, the failure, the bound state.

``ToolBase`` binds the tools to one database state and compatibility mode and holds
the two lookups both halves of the toolset use (:mod:`.read_tools` and
:mod:`.write_tools`; :mod:`.tools` puts them together). A tool signals failure by
raising :class:`ToolError`, which the domain turns into an ``"Error: ..."`` observation.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from agentgrpo.envs.airline.core.db import TAU_BENCH_AIRPORTS, Store

Compat = Literal["tau_bench", "fixed"]


class ToolError(Exception):
    """A tool refused the call; the message becomes ``"Error: <message>"``."""


class ToolBase:
    """The database state, compatibility mode and airport list the tools work on."""

    def __init__(
        self, db: Store, compat: Compat = "tau_bench", airports: Mapping[str, str] | None = None
    ) -> None:
        self.db = db
        self.compat = compat
        self.airports = TAU_BENCH_AIRPORTS if airports is None else airports

    def _user(self, user_id: str) -> Any:
        user = self.db.get("users", user_id)
        if user is None:
            raise ToolError("user not found")
        return user

    def _reservation(self, reservation_id: str) -> Any:
        reservation = self.db.get("reservations", reservation_id)
        if reservation is None:
            raise ToolError("reservation not found")
        return reservation
