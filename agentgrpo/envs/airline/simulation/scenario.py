"""Structured goals of generated tasks: what the scripted user wants and knows.

A ``Scenario`` is the machine-readable twin of a task's natural-language
instruction. The scripted user answers the agent's questions from its fields and
accepts a write only if the agent's confirmation matches one of its
``confirmations``; the oracle agent uses it as private knowledge of the user's
answers. Every field is plain JSON data, so ``to_dict``/``from_dict`` round-trip.
See docs/environment-generated.md for the meaning of each field per family.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

Intent = Literal[
    "cancel", "change_flight", "change_cabin", "add_bags", "update_passengers",
    "add_insurance", "add_passenger", "book", "compensation", "info", "transfer",
]
Expected = Literal["write", "refusal", "answer", "transfer"]

# requests no tool can serve (the transfer family): what the user wants, in their words
OUT_OF_SCOPE = {
    "lost_item": "find a laptop you left on board a recent flight",
    "wheelchair": "arrange wheelchair assistance at the airport for your next trip",
    "meal": "order a special vegetarian meal for your next flight",
}


def their_request(request: str) -> str:
    """An out-of-scope request in the third person ("find a laptop they left on board ...")."""
    return OUT_OF_SCOPE[request].replace("your", "their")


def transfer_summary(user_id: str, request: str) -> str:
    """What the agent tells the human agent about an out-of-scope request."""
    return f"User {user_id} needs help to {their_request(request)}."


@dataclass
class Confirmation:
    """A write the user wants, and how to recognise the agent's confirmation of it.

    action: tool name of the wanted write (e.g. ``cancel_reservation``).
    keywords: at least one must appear in the confirmation (lower case).
    required: entity type -> values that must all be stated (see ``dialogue``).
    allowed: entity type -> other values the agent may state. For every entity type
        present in ``required`` or ``allowed``, a stated value outside both makes the
        user answer "no". Types absent from both are not checked.
    names: full names that must appear (case-insensitive).
    """

    action: str
    keywords: list[str]
    required: dict[str, list[Any]] = field(default_factory=dict)
    allowed: dict[str, list[Any]] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Scenario:
    """The user's side of a generated task (fields unused by a family stay empty).

    family / intent / expected: the task family, what the user asks for, and the
        correct outcome (``write``: the wanted writes happen; ``refusal``: policy
        forbids it; ``answer``: an information question; ``transfer``: a human is needed).
    user_id, reservation_id: what the user can tell the agent.
    reason: cancellation reason (``change_of_plan``, ``airline_cancelled``, ``health``,
        ``weather``, ``delay``).
    disrupted_flight: ``{"flight_number", "date", "status"}`` the user complains about.
    trip: booking request ``{"origin", "destination", "flight_type", "dates", "cabin"}``.
    preference: how the user picks among flights (``cheapest``, ``earliest``, ``latest``).
    flight_choices: flight numbers the user picks, one per searched leg, in order.
    change_leg / new_date: which leg moves (``only`` for a one-way trip, else ``outbound``
        or ``return``) and to which date.
    cabin: the cabin the user wants (cabin change).
    passengers: booking passengers ``[{"first_name", "last_name", "dob"}]``.
    passenger_update: ``{"index", "old", "new"}`` for a passenger correction.
    bags: checked bags for a booking, or bags to add to a reservation.
    insurance: ``yes``/``no`` for a booking.
    payment_ids: payment methods in the user's order of preference.
    rejected_payment_ids: a first payment request that breaks the limits (the user
        falls back to ``payment_ids`` once the agent states the limit).
    question / answer: the information question key and the expected output strings.
    request: the out-of-scope request (transfer family).
    confirmations: the writes the user will say "yes" to, in order.
    """

    family: str
    intent: Intent
    expected: Expected
    user_id: str
    reservation_id: str | None = None
    reason: str | None = None
    disrupted_flight: dict[str, str] | None = None
    trip: dict[str, Any] | None = None
    preference: str | None = None
    flight_choices: list[str] = field(default_factory=list)
    change_leg: str | None = None
    new_date: str | None = None
    cabin: str | None = None
    passengers: list[dict[str, str]] = field(default_factory=list)
    passenger_update: dict[str, Any] | None = None
    bags: int | None = None
    insurance: str | None = None
    payment_ids: list[str] = field(default_factory=list)
    rejected_payment_ids: list[str] = field(default_factory=list)
    question: str | None = None
    answer: list[str] = field(default_factory=list)
    request: str | None = None
    confirmations: list[Confirmation] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Scenario:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown scenario fields: {sorted(unknown)}")
        values = dict(data)
        values["confirmations"] = [
            c if isinstance(c, Confirmation) else Confirmation(**c)
            for c in data.get("confirmations", [])
        ]
        return cls(**values)

    @classmethod
    def of(cls, value: Any) -> Scenario:
        """The scenario of a task, whether stored as a ``Scenario`` or as its dict."""
        if isinstance(value, Scenario):
            return value
        if isinstance(value, dict):
            return cls.from_dict(value)
        raise ValueError("this task has no scenario (only generated tasks have one); "
                         "use an LLM user for τ-bench tasks")
