"""Shared pieces of the task families: the registry, world queries, confirmations.

A *family* is a function ``(ctx: FamilyContext) -> TaskDraft`` registered by name
with ``@family("name")``. It finds a fitting user/reservation in the world (raising
``NoCandidate`` when there is none), decides the gold actions with the rules in
``policy``, and describes the user's side as a ``Scenario``. The helpers here keep
the families short and make every family build its confirmations the same way.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from agentgrpo.envs.airline.core.policy import TODAY
from agentgrpo.envs.airline.simulation.dialogue import spoken_date
from agentgrpo.envs.airline.simulation.scenario import Confirmation, Scenario
from agentgrpo.envs.types import Action

T = TypeVar("T")


class NoCandidate(Exception):
    """The world holds nothing this family can build a task from."""


@dataclass
class FamilyContext:
    """What a family generator gets: the world, its own rng, and keys already used."""

    world: dict[str, dict[str, Any]]
    rng: random.Random
    used: set[str] = field(default_factory=set)

    def pick(self, candidates: Sequence[T], key: Callable[[T], str]) -> T:
        """A random candidate, preferring ones this family has not used yet."""
        if not candidates:
            raise NoCandidate
        fresh = [c for c in candidates if key(c) not in self.used]
        chosen = self.rng.choice(fresh or list(candidates))
        self.used.add(key(chosen))
        return chosen

    def user(self, user_id: str) -> dict[str, Any]:
        return self.world["users"][user_id]

    def reservations(self, predicate: Callable[[dict, dict], bool]) -> list[dict[str, Any]]:
        """Reservations (sorted by id) whose (reservation, owner) satisfy ``predicate``."""
        users = self.world["users"]
        return [r for _, r in sorted(self.world["reservations"].items())
                if predicate(r, users[r["user_id"]])]

    def status(self, flight_number: str, day: str) -> str:
        return self.world["flights"][flight_number]["dates"][day]["status"]


@dataclass
class TaskDraft:
    """A family's output, before ``task_gen`` gives it an id and verifies it."""

    scenario: Scenario
    actions: list[Action]
    instruction: str
    outputs: list[str] = field(default_factory=list)


FamilyFn = Callable[[FamilyContext], TaskDraft]
FAMILIES: dict[str, FamilyFn] = {}


def family(name: str) -> Callable[[FamilyFn], FamilyFn]:
    """Register a task family under ``name``."""
    def register(fn: FamilyFn) -> FamilyFn:
        if name in FAMILIES:
            raise ValueError(f"task family {name!r} registered twice")
        FAMILIES[name] = fn
        return fn
    return register


# ---- world queries ---------------------------------------------------------------
def all_future(reservation: dict[str, Any]) -> bool:
    return all(s["date"] > TODAY for s in reservation["flights"])


def is_direct_trip(reservation: dict[str, Any]) -> bool:
    """One segment per direction (what the change-flight families handle)."""
    legs = len(reservation["flights"])
    return legs == (2 if reservation["flight_type"] == "round_trip" else 1)


def is_active(reservation: dict[str, Any]) -> bool:
    return reservation.get("status") != "cancelled"


def all_bookable(ctx: FamilyContext, reservation: dict[str, Any]) -> bool:
    return all(ctx.status(s["flight_number"], s["date"]) == "available"
               for s in reservation["flights"])


def direct_options(ctx: FamilyContext, origin: str, destination: str, day: str,
                   cabin: str, travellers: int) -> list[dict[str, Any]]:
    """Bookable direct flights with enough seats, in search-result (flight number) order."""
    options = []
    for number, flight in sorted(ctx.world["flights"].items()):
        record = flight["dates"].get(day)
        if flight["origin"] != origin or flight["destination"] != destination or not record:
            continue
        if record["status"] == "available" and record["available_seats"][cabin] >= travellers:
            options.append({"flight_number": number, "date": day,
                            "departure": flight["scheduled_departure_time_est"],
                            "price": record["prices"][cabin]})
    return options


PREFERENCES = ("cheapest", "earliest", "latest")


def choose_flight(options: list[dict[str, Any]], preference: str) -> dict[str, Any]:
    """The option a user with ``preference`` picks; it must be the unique best."""
    if not options:
        raise NoCandidate
    key = "price" if preference == "cheapest" else "departure"
    ranked = sorted(options, key=lambda o: o[key], reverse=preference == "latest")
    if len(ranked) > 1 and ranked[0][key] == ranked[1][key]:
        raise NoCandidate  # a tie would make the instruction ambiguous
    return ranked[0]


def preference_phrase(preference: str, cabin: str) -> str:
    cabin_words = cabin.replace("_", " ")
    return {"cheapest": f"the cheapest direct flight in {cabin_words}",
            "earliest": "the direct flight that leaves earliest in the day",
            "latest": "the direct flight that leaves latest in the day"}[preference]


def payers(user: dict[str, Any], positive_charge: int) -> list[str]:
    """Profile methods that can settle a change: credit cards, gift cards with balance."""
    return sorted(pid for pid, m in user["payment_methods"].items()
                  if m["source"] == "credit_card"
                  or (m["source"] == "gift_card" and m["amount"] >= max(0, positive_charge)))


def describe_method(user: dict[str, Any], payment_id: str) -> str:
    """How a user refers to a payment method in an instruction."""
    method = user["payment_methods"][payment_id]
    if method["source"] == "credit_card":
        return f"your {method['brand']} credit card ending in {method['last_four']} ({payment_id})"
    kind = "gift card" if method["source"] == "gift_card" else "travel certificate"
    return f"your {kind} {payment_id}"


def full_name(person: dict[str, str]) -> str:
    return f"{person['first_name']} {person['last_name']}"


def trip_words(reservation: dict[str, Any]) -> str:
    kind = "round trip" if reservation["flight_type"] == "round_trip" else "one-way trip"
    first = reservation["flights"][0]
    return (f"the {kind} from {reservation['origin']} to {reservation['destination']} "
            f"leaving {spoken_date(first['date'])}")


# ---- confirmations and gold actions ----------------------------------------------
def cancel_confirmation(reservation: dict[str, Any]) -> Confirmation:
    return Confirmation("cancel_reservation", ["cancel"],
                        required={"reservation_id": [reservation["reservation_id"]]},
                        allowed={"reservation_id": []})


def certificate_confirmation(amount: int, per_passenger: int,
                             reservation_id: str | None) -> Confirmation:
    return Confirmation("send_certificate", ["certificate"], required={"amount": [amount]},
                        allowed={"amount": [per_passenger],
                                 "reservation_id": [reservation_id] if reservation_id else []})


def flights_confirmation(reservation: dict[str, Any], cabin: str, new_flights: list[dict],
                         payment_id: str, difference: int) -> Confirmation:
    """Confirmation of ``update_reservation_flights`` (flight change or cabin change)."""
    old = reservation["flights"]
    old_refs = {(f["flight_number"], f["date"]) for f in old}
    added = [f for f in new_flights if (f["flight_number"], f["date"]) not in old_refs]
    cabin_change = cabin != reservation["cabin"]
    required: dict[str, list[Any]] = {"reservation_id": [reservation["reservation_id"]],
                                      "payment_id": [payment_id]}
    if cabin_change:
        required["cabin"] = [cabin]
    if added:
        required["flight_number"] = sorted({f["flight_number"] for f in added})
        required["date"] = sorted({f["date"] for f in added})
    allowed = {
        "flight_number": sorted({f["flight_number"] for f in old + new_flights}),
        "date": sorted({f["date"] for f in old + new_flights}),
        "cabin": sorted({cabin, reservation["cabin"]}) if cabin_change else [cabin],
        "amount": [abs(difference)],
        "payment_id": [],
        "reservation_id": [],
    }
    keywords = ["change", "move", "switch", "upgrade", "downgrade", "replace", "update"]
    return Confirmation("update_reservation_flights", keywords, required=required,
                        allowed=allowed)


def flight_refs(flights: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [{"flight_number": f["flight_number"], "date": f["date"]} for f in flights]
