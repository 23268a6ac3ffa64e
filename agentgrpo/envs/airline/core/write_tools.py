"""The airline tools that write: booking, cancelling, certificates and reservation changes.

Each write tool checks everything first (flights on sale, seats, payment balances) and
then writes through ``db.mutable``/``db.put``; the domain runs it in a transaction and
drops its writes if it raises, so a failing tool changes nothing. The pricing, seat and
payment steps the tools share are the private helpers at the top of ``WriteTools``.
τ-bench's quirks apply under ``compat="tau_bench"``, τ²-bench's fixes under ``"fixed"``.
"""
from __future__ import annotations

from typing import Any

from agentgrpo.envs.airline.core.db import (
    BAG_PRICE,
    CERTIFICATE_IDS,
    INSURANCE_PRICE,
    NEW_RESERVATION_IDS,
    NOW_ISO,
)
from agentgrpo.envs.airline.core.schema import (
    CabinClass,
    FlightRef,
    FlightType,
    Insurance,
    PassengerInfo,
    PaymentSplit,
    tool,
)
from agentgrpo.envs.airline.core.tool_base import ToolBase, ToolError


class WriteTools(ToolBase):
    """The tools that change the database, in τ-bench's order, and their shared steps."""

    # ---- pricing, seats and payments -----------------------------------------------------
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

