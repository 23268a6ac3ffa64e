"""Our airline policy: the text shown to agents and the same rules as small functions.

``load_policy()`` returns ``policy.md`` (our own wording of τ-bench's airline rules).
The functions below encode those rules once, so the task generator (which decides the
gold actions) and the oracle agent (which must reach the same decisions from what it
reads) cannot drift apart.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from importlib import resources
from typing import Any, Literal

from agentgrpo.envs.airline.core.db import NOW_DATE as TODAY
from agentgrpo.envs.airline.core.db import NOW_ISO as NOW

CABINS: tuple[str, ...] = ("basic_economy", "economy", "business")
Cabin = Literal["basic_economy", "economy", "business"]
CancelReason = Literal["change_of_plan", "airline_cancelled", "health", "weather", "other"]

BAG_FEE = 50
INSURANCE_PER_PASSENGER = 30
MAX_PASSENGERS = 5
CANCELLED_FLIGHT_CREDIT = 100  # certificate per passenger for a cancelled flight
DELAYED_FLIGHT_CREDIT = 50     # certificate per passenger for a delay, after change/cancel
INSURED_REASONS = ("health", "weather")
PAYMENT_LIMITS = {"certificate": 1, "credit_card": 1, "gift_card": 3}
_FREE_BAGS = {
    "regular": {"basic_economy": 0, "economy": 1, "business": 2},
    "silver": {"basic_economy": 1, "economy": 2, "business": 3},
    "gold": {"basic_economy": 2, "economy": 3, "business": 3},
}


def load_policy() -> str:
    """The policy text given to agents as their system prompt."""
    return resources.files("agentgrpo.envs.airline.core").joinpath("policy.md").read_text("utf-8")


def free_bags_per_passenger(membership: str, cabin: str) -> int:
    return _FREE_BAGS[membership][cabin]


def nonfree_bags(membership: str, cabin: str, passengers: int, total_bags: int) -> int:
    """Bags that cost $50 each when ``total_bags`` are checked on a new booking."""
    return max(0, total_bags - free_bags_per_passenger(membership, cabin) * passengers)


def booked_within_24h(created_at: str) -> bool:
    return datetime.fromisoformat(created_at) > datetime.fromisoformat(NOW) - timedelta(days=1)


def has_flown_segment(reservation: dict[str, Any]) -> bool:
    """A segment dated before today has been used (or missed): the trip has started."""
    return any(segment["date"] < TODAY for segment in reservation["flights"])


def cancellation_rule(reservation: dict[str, Any], reason: str) -> str | None:
    """The policy clause that allows cancelling, or ``None`` when it must be refused.

    Assumes nothing has been flown (check ``has_flown_segment`` first: that case is a
    transfer, not a refusal). Clauses in policy order: ``within_24h``,
    ``airline_cancelled``, ``business``, ``insurance``.
    """
    if booked_within_24h(reservation["created_at"]):
        return "within_24h"
    if reason == "airline_cancelled":
        return "airline_cancelled"
    if reservation["cabin"] == "business":
        return "business"
    if reservation["insurance"] == "yes" and reason in INSURED_REASONS:
        return "insurance"
    return None


def compensation_eligible(membership: str, reservation: dict[str, Any]) -> bool:
    """Silver/gold members, insured trips and business cabins may get a certificate."""
    return (membership in ("silver", "gold") or reservation["insurance"] == "yes"
            or reservation["cabin"] == "business")


def compensation_amount(kind: Literal["cancelled", "delayed"], passengers: int) -> int:
    per_passenger = CANCELLED_FLIGHT_CREDIT if kind == "cancelled" else DELAYED_FLIGHT_CREDIT
    return per_passenger * passengers


def payment_limit_violation(sources: list[str]) -> str | None:
    """Which per-reservation payment limit a list of method sources breaks, if any."""
    for source, limit in PAYMENT_LIMITS.items():
        if sources.count(source) > limit:
            return source
    return None


def split_payment(total: int, methods: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """Pay ``total`` with profile methods in the user's order of preference.

    Gift cards and certificates give up to their balance, in order; the credit card (at
    most one, anywhere in the list) takes whatever remains. Methods that end up paying
    nothing are left out. ``None`` when the methods cannot cover the total or break
    the payment limits.
    """
    if payment_limit_violation([m["source"] for m in methods]):
        return None
    remaining, plan = total, []
    for method in methods:
        if method["source"] == "credit_card" or remaining <= 0:
            continue
        amount = min(method["amount"], remaining)
        plan.append({"payment_id": method["id"], "amount": amount})
        remaining -= amount
    card = next((m for m in methods if m["source"] == "credit_card"), None)
    if remaining > 0:
        if card is None:
            return None
        plan.append({"payment_id": card["id"], "amount": remaining})
    return [p for p in plan if p["amount"] > 0]


def booking_price(segment_prices: list[int], passengers: int, insurance: str,
                  nonfree: int) -> int:
    """What ``book_reservation`` charges: fares, insurance and non-free bags."""
    insurance_cost = INSURANCE_PER_PASSENGER * passengers if insurance == "yes" else 0
    return sum(segment_prices) * passengers + insurance_cost + BAG_FEE * nonfree
