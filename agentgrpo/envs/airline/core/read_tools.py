"""The airline tools that change nothing: lookups, flight searches, calculate, think, transfer.

These are τ-bench's read tools (``get_*``, ``list_all_airports``, ``search_*``), its two
generic ones (``calculate``, ``think``) and its terminal one (``transfer_to_human_agents``),
with τ-bench's quirks under ``compat="tau_bench"`` and τ²-bench's fixes under
``compat="fixed"``. The domain runs them outside a transaction, where a write raises.
"""
from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from typing import Any

from agentgrpo.envs.airline.core.calculator import evaluate_expression
from agentgrpo.envs.airline.core.schema import tool
from agentgrpo.envs.airline.core.tool_base import ToolBase, ToolError


def next_day(date: str) -> str | None:
    """The ISO date after ``date`` (None if it is not a date): fixed one-stop search."""
    try:
        return (_dt.date.fromisoformat(date) + _dt.timedelta(days=1)).isoformat()
    except ValueError:
        return None


def _flight_leg(flight: Mapping[str, Any], day: Mapping[str, Any]) -> dict[str, Any]:
    """A flight as search results show it: its fields but ``dates``, plus one day's."""
    leg = {k: v for k, v in flight.items() if k != "dates"}
    leg.update(day)
    return leg


class ReadTools(ToolBase):
    """The tools that only read the database (or nothing at all), in τ-bench's order."""

    @tool("generic")
    def calculate(self, expression: str) -> str:
        """Evaluate an arithmetic expression and return the result rounded to 2 decimals.

        Args:
            expression: Numbers combined with +, -, *, / and parentheses, for example
                '(120 + 80) * 2'.
        """
        return str(round(float(evaluate_expression(expression)), 2))

    @tool("read")
    def get_reservation_details(self, reservation_id: str) -> Any:
        """Look up a reservation.

        Args:
            reservation_id: Id of the reservation, for example '8JX2WO'.
        """
        reservation = self.db.get("reservations", reservation_id)
        if reservation is None:
            # τ-bench's message names the wrong entity; τ²-bench corrected it.
            raise ToolError("reservation not found" if self.compat == "fixed" else "user not found")
        return reservation

    @tool("read")
    def get_user_details(self, user_id: str) -> Any:
        """Look up a user's profile: payment methods, membership and reservation ids.

        Args:
            user_id: Id of the user, for example 'sara_doe_496'.
        """
        return self._user(user_id)

    @tool("read")
    def list_all_airports(self) -> dict[str, str]:
        """List the IATA codes of all airports served, each with its city."""
        return dict(self.airports)

    @tool("read")
    def search_direct_flight(self, origin: str, destination: str, date: str) -> list[dict[str, Any]]:
        """Find nonstop flights between two airports that can be booked on a date.

        Args:
            origin: IATA code of the departure airport, for example 'JFK'.
            destination: IATA code of the arrival airport, for example 'LAX'.
            date: Departure date as YYYY-MM-DD, for example '2024-05-01'.
        """
        results = []
        for _, flight in self.db.items("flights"):
            if flight["origin"] != origin or flight["destination"] != destination:
                continue
            day = flight["dates"].get(date)
            if day is not None and day["status"] == "available":
                results.append(_flight_leg(flight, day))
        return results

    @tool("read")
    def search_onestop_flight(self, origin: str, destination: str, date: str) -> list[list[dict[str, Any]]]:
        """Find bookable connections with one stop, leaving on a date.

        Each result is a pair [first leg, second leg]; the second leg is dated the
        next day when the first one arrives after midnight.

        Args:
            origin: IATA code of the departure airport, for example 'JFK'.
            destination: IATA code of the final arrival airport, for example 'LAX'.
            date: Departure date of the first leg as YYYY-MM-DD, for example '2024-05-01'.
        """
        flights = [flight for _, flight in self.db.items("flights")]
        results = []
        for first in (f for f in flights if f["origin"] == origin):
            arrival = first["scheduled_arrival_time_est"]
            for second in flights:
                if second["destination"] != destination or first["destination"] != second["origin"]:
                    continue
                overnight = "+1" in arrival
                if self.compat == "fixed":
                    date2 = next_day(date) if overnight else date
                else:  # τ-bench: no zero padding, May hard-coded
                    date2 = f"2024-05-{int(date[-2:]) + 1}" if overnight else date
                if arrival > second["scheduled_departure_time_est"]:
                    continue
                day1, day2 = first["dates"].get(date), second["dates"].get(date2)
                if day1 is None or day2 is None:
                    continue
                if day1["status"] != "available" or day2["status"] != "available":
                    continue
                # τ-bench shows the second leg's status/seats/prices of the FIRST leg's date.
                shown2 = day2 if self.compat == "fixed" else second["dates"][date]
                results.append([
                    {**_flight_leg(first, day1), "date": date},
                    {**_flight_leg(second, shown2), "date": date2},
                ])
        return results

    @tool("generic")
    def think(self, thought: str) -> str:
        """Write down reasoning; nothing is looked up or changed.

        Args:
            thought: The reasoning to note.
        """
        return ""

    @tool("terminal")
    def transfer_to_human_agents(self, summary: str) -> str:
        """Hand the conversation to a human agent; this ends the episode.

        Args:
            summary: A short account of what the user needs.
        """
        return "Transfer successful"
