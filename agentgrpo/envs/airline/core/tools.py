"""The 14 airline tools of τ-bench as typed methods over a database state.

Names, arguments, JSON types, enums and required lists are τ-bench's; schemas are
generated from the signatures and docstrings below (:mod:`.schema`). Behaviour is
τ-bench's, quirks included, under ``compat="tau_bench"``; ``compat="fixed"`` applies
τ²-bench's fixes (table in ``docs/environment.md``). Tools raise :class:`ToolError`
(or any exception) on failure; the domain turns that into an ``"Error: ..."``
observation and discards the transaction, so a failing tool changes nothing.
Tools return a JSON-able value (serialised with ``json.dumps``) or a string.
"""
from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from typing import Any, Literal

from agentgrpo.envs.airline.core.calculator import evaluate_expression
from agentgrpo.envs.airline.core.db import (
    BAG_PRICE,
    CERTIFICATE_IDS,
    INSURANCE_PRICE,
    NEW_RESERVATION_IDS,
    NOW_ISO,
    TAU_BENCH_AIRPORTS,
    Store,
)
from agentgrpo.envs.airline.core.schema import (
    CabinClass,
    FlightRef,
    FlightType,
    Insurance,
    PassengerInfo,
    PaymentSplit,
    ToolKind,
    function_schema,
    tool,
    tool_kinds,
)

Compat = Literal["tau_bench", "fixed"]


class ToolError(Exception):
    """A tool refused the call; the message becomes ``"Error: <message>"``."""


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


class AirlineTools:
    """The airline tools bound to one database state and compatibility mode."""

    def __init__(
        self, db: Store, compat: Compat = "tau_bench", airports: Mapping[str, str] | None = None
    ) -> None:
        self.db = db
        self.compat = compat
        self.airports = TAU_BENCH_AIRPORTS if airports is None else airports

    # ---- shared lookups ----------------------------------------------------------------
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

    def _priced_segment(self, ref: FlightRef, cabin: str, travellers: int) -> dict[str, Any]:
        """Check a flight can be sold today for ``travellers`` and price it.

        The segment is ``ref`` (with any extra fields the caller sent, as τ-bench stores
        them) plus the flight's price in the cabin, origin and destination.
        """
        number, date = ref["flight_number"], ref["date"]
        flight = self.db.get("flights", number)
        if flight is None:
            raise ToolError(f"flight {number} not found")
        day = flight["dates"].get(date)
        if day is None:
            raise ToolError(f"flight {number} not found on date {date}")
        if day["status"] != "available":
            raise ToolError(f"flight {number} not available on date {date}")
        if day["available_seats"][cabin] < travellers:
            raise ToolError(f"not enough seats on flight {number}")
        return {**ref, "price": day["prices"][cabin], "origin": flight["origin"],
                "destination": flight["destination"]}

    def _new_reservation_id(self) -> str:
        free = [rid for rid in NEW_RESERVATION_IDS if not self.db.has("reservations", rid)]
        if free:
            return free[0]
        if self.compat == "fixed":
            raise ToolError("too many reservations")
        return NEW_RESERVATION_IDS[-1]  # τ-bench overwrites the third id

    def _check_booking_payments(self, user: Any, payments: list[PaymentSplit], price: Any) -> None:
        methods = user["payment_methods"]
        for payment in payments:
            pid, amount = payment["payment_id"], payment["amount"]
            if pid not in methods:
                raise ToolError(f"payment method {pid} not found")
            if methods[pid]["source"] in ("gift_card", "certificate") and methods[pid]["amount"] < amount:
                raise ToolError(f"not enough balance in payment method {pid}")
        paid = sum(payment["amount"] for payment in payments)
        if paid != price:
            raise ToolError(f"payment amount does not add up, total price is {price}, but paid {paid}")

    def _charge_booking(self, user_id: str, payments: list[PaymentSplit]) -> Any:
        """Deduct gift-card shares and use up certificates; returns the writable user."""
        user = self.db.mutable("users", user_id)
        for payment in payments:
            method = user["payment_methods"][payment["payment_id"]]
            if method["source"] == "gift_card":
                method["amount"] -= payment["amount"]
            elif method["source"] == "certificate":
                del user["payment_methods"][payment["payment_id"]]
        return user

    def _take_seats(self, segments: list[dict[str, Any]], cabin: str, travellers: int) -> None:
        """τ²-bench's fix: a booking takes its seats (τ-bench never does)."""
        for seg in segments:
            day = self.db.mutable("flights", seg["flight_number"])["dates"][seg["date"]]
            day["available_seats"][cabin] -= travellers

    def _charge_for_update(self, user_id: str, payment_id: str, amount: Any) -> None:
        """Check and charge (or refund, if negative) one method for a change."""
        method = self._user(user_id)["payment_methods"].get(payment_id)
        if method is None:
            raise ToolError("payment method not found")
        if method["source"] == "certificate":
            raise ToolError("certificate cannot be used to update reservation")
        if method["source"] == "gift_card" and method["amount"] < amount:
            raise ToolError("gift card balance is not enough")
        if method["source"] == "gift_card":
            self.db.mutable("users", user_id)["payment_methods"][payment_id]["amount"] -= amount

    # ---- the tools, in τ-bench's order -------------------------------------------------
    @tool("write")
    def book_reservation(
        self,
        user_id: str,
        origin: str,
        destination: str,
        flight_type: FlightType,
        cabin: CabinClass,
        flights: list[FlightRef],
        passengers: list[PassengerInfo],
        payment_methods: list[PaymentSplit],
        total_baggages: int,
        nonfree_baggages: int,
        insurance: Insurance,
    ) -> dict[str, Any]:
        """Create a reservation for a user and charge it to their payment methods.

        The price is every flight's current fare in the cabin times the number of
        passengers, plus 30 dollars per passenger with insurance, plus 50 dollars per
        non-free bag. The payments must add up to exactly that price, and gift cards
        and certificates must hold enough balance for their share.

        Args:
            user_id: Id of the user who books, for example 'sara_doe_496'.
            origin: IATA code of the trip's origin, for example 'SFO'.
            destination: IATA code of the trip's destination, for example 'JFK'.
            flight_type: Whether the trip is one way or a round trip.
            cabin: Cabin class for every flight of the reservation.
            flights: Every flight of the itinerary, each with its number and date.
            passengers: Every traveller on the reservation.
            payment_methods: How the price is split over the user's payment methods.
            total_baggages: Number of checked bags on the reservation.
            nonfree_baggages: How many of those bags are paid for.
            insurance: Whether to buy travel insurance.
        """
        user = self._user(user_id)
        reservation_id = self._new_reservation_id()
        segments = [self._priced_segment(ref, cabin, len(passengers)) for ref in flights]
        price = sum(seg["price"] * len(passengers) for seg in segments)
        if insurance == "yes":
            price += INSURANCE_PRICE * len(passengers)
        price += BAG_PRICE * nonfree_baggages
        self._check_booking_payments(user, payment_methods, price)

        user = self._charge_booking(user_id, payment_methods)
        if self.compat == "fixed":
            self._take_seats(segments, cabin, len(passengers))
        reservation = {
            "reservation_id": reservation_id, "user_id": user_id, "origin": origin,
            "destination": destination, "flight_type": flight_type, "cabin": cabin,
            "flights": segments, "passengers": passengers, "payment_history": payment_methods,
            "created_at": NOW_ISO, "total_baggages": total_baggages,
            "nonfree_baggages": nonfree_baggages, "insurance": insurance,
        }
        self.db.put("reservations", reservation_id, reservation)
        user["reservations"].append(reservation_id)
        return reservation

    @tool("generic")
    def calculate(self, expression: str) -> str:
        """Evaluate an arithmetic expression and return the result rounded to 2 decimals.

        Args:
            expression: Numbers combined with +, -, *, / and parentheses, for example
                '(120 + 80) * 2'.
        """
        return str(round(float(evaluate_expression(expression)), 2))

    @tool("write")
    def cancel_reservation(self, reservation_id: str) -> dict[str, Any]:
        """Cancel a whole reservation and refund every payment made for it.

        Args:
            reservation_id: Id of the reservation, for example 'ZFA04Y'.
        """
        self._reservation(reservation_id)
        reservation = self.db.mutable("reservations", reservation_id)
        refunds = [
            {"payment_id": p["payment_id"], "amount": -p["amount"]}
            for p in reservation["payment_history"]
        ]
        reservation["payment_history"].extend(refunds)
        reservation["status"] = "cancelled"
        return reservation

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

    @tool("write")
    def send_certificate(self, user_id: str, amount: float) -> str:
        """Give a user a travel certificate worth some dollars (use with care).

        Args:
            user_id: Id of the user who receives it, for example 'sara_doe_496'.
            amount: Value of the certificate in dollars.
        """
        methods = self._user(user_id)["payment_methods"]
        for payment_id in CERTIFICATE_IDS:
            if payment_id not in methods:
                certificate = {"source": "certificate", "amount": amount, "id": payment_id}
                self.db.mutable("users", user_id)["payment_methods"][payment_id] = certificate
                return f"Certificate {payment_id} added to user {user_id} with amount {amount}."
        if self.compat == "fixed":
            raise ToolError("too many certificates")
        return "None"  # τ-bench's tool returns None here

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

    @tool("write")
    def update_reservation_baggages(
        self, reservation_id: str, total_baggages: int, nonfree_baggages: int, payment_id: str
    ) -> dict[str, Any]:
        """Set a reservation's bag counts, charging 50 dollars per added non-free bag.

        Args:
            reservation_id: Id of the reservation, for example 'ZFA04Y'.
            total_baggages: New total number of checked bags.
            nonfree_baggages: New number of paid bags.
            payment_id: Payment method id from the user's profile that pays for the
                extra bags, for example 'credit_card_7815826'.
        """
        reservation = self._reservation(reservation_id)
        charge = BAG_PRICE * max(0, nonfree_baggages - reservation["nonfree_baggages"])
        self._charge_for_update(reservation["user_id"], payment_id, charge)
        reservation = self.db.mutable("reservations", reservation_id)
        reservation["total_baggages"] = total_baggages
        reservation["nonfree_baggages"] = nonfree_baggages
        if charge != 0:
            reservation["payment_history"].append({"payment_id": payment_id, "amount": charge})
        return reservation

    @tool("write")
    def update_reservation_flights(
        self, reservation_id: str, cabin: CabinClass, flights: list[FlightRef], payment_id: str
    ) -> dict[str, Any]:
        """Replace a reservation's itinerary (and cabin) and settle the fare difference.

        Flights kept from the old itinerary in the same cabin keep the price paid;
        the others are priced at today's fare. The difference is charged to (or, if
        negative, refunded to) the payment method; certificates cannot be used.

        Args:
            reservation_id: Id of the reservation, for example 'ZFA04Y'.
            cabin: Cabin class for the whole new itinerary.
            flights: Every flight of the NEW itinerary, unchanged ones included.
            payment_id: Payment method id from the user's profile that settles the
                difference, for example 'gift_card_7815826'.
        """
        reservation = self._reservation(reservation_id)
        travellers = len(reservation["passengers"])
        segments = []
        for ref in flights:
            kept = next(
                (f for f in reservation["flights"]
                 if f["flight_number"] == ref["flight_number"] and f["date"] == ref["date"]
                 and cabin == reservation["cabin"]),
                None,
            )
            if kept is None:
                segments.append(self._priced_segment(ref, cabin, travellers))
            else:
                segments.append({**ref, "price": kept["price"], "origin": kept["origin"],
                                 "destination": kept["destination"]})
        difference = sum(seg["price"] for seg in segments) * travellers
        difference -= sum(f["price"] for f in reservation["flights"]) * travellers
        self._charge_for_update(reservation["user_id"], payment_id, difference)
        reservation = self.db.mutable("reservations", reservation_id)
        reservation["flights"] = segments
        if difference != 0:
            reservation["payment_history"].append({"payment_id": payment_id, "amount": difference})
        if self.compat == "fixed":
            reservation["cabin"] = cabin  # τ-bench leaves the old cabin in place
        return reservation

    @tool("write")
    def update_reservation_passengers(
        self, reservation_id: str, passengers: list[PassengerInfo]
    ) -> dict[str, Any]:
        """Replace the traveller details of a reservation; the count cannot change.

        Args:
            reservation_id: Id of the reservation, for example 'ZFA04Y'.
            passengers: Every traveller, in order, with corrected details.
        """
        reservation = self._reservation(reservation_id)
        if len(passengers) != len(reservation["passengers"]):
            raise ToolError("number of passengers does not match")
        reservation = self.db.mutable("reservations", reservation_id)
        reservation["passengers"] = passengers
        return reservation


TOOL_KINDS: dict[str, ToolKind] = tool_kinds(AirlineTools)
"""Tool name → kind, in τ-bench's order."""

TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    name: function_schema(getattr(AirlineTools, name)) for name in TOOL_KINDS
}
"""Tool name → OpenAI function-calling schema, generated once at import."""
