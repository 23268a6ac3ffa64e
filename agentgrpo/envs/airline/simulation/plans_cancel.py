"""The oracle's plans for cancelling a reservation and for compensation certificates.

``plan_cancel`` cancels what the cancellation rules allow, refuses the rest and transfers
a partly flown trip (with a delay certificate offered when the member is eligible);
``plan_compensation`` offers the certificate for a cancelled flight, or refuses it.
"""
from __future__ import annotations

from typing import Any, Literal

from agentgrpo.envs.airline.core.policy import (
    CANCELLED_FLIGHT_CREDIT,
    DELAYED_FLIGHT_CREDIT,
    cancellation_rule,
    compensation_amount,
    compensation_eligible,
    has_flown_segment,
)
from agentgrpo.envs.airline.simulation.oracle import OracleAgent, Script
from agentgrpo.envs.airline.simulation.plans_common import CABIN_WORDS, reckon_sum, report, route_text


def _cancel_refusal(reservation: dict[str, Any], reason: str | None) -> str:
    cover = ("travel insurance does not cover this reason" if reservation["insurance"] == "yes"
             else "it has no travel insurance")
    return (f"I'm sorry, but I cannot cancel reservation {reservation['reservation_id']}: it was "
            f"booked more than 24 hours ago, the airline did not cancel its flights, it is in "
            f"{CABIN_WORDS[reservation['cabin']]}, and {cover}.")


def plan_cancel(o: OracleAgent) -> Script:
    s = o.scenario
    profile = yield from o.authenticate()
    res = yield from o.reservation("Which reservation would you like to cancel, and what is "
                                   "the reason for the cancellation?")
    rid = res["reservation_id"]
    if has_flown_segment(res):
        yield from o.transfer(f"User {s.user_id} wants to cancel reservation {rid}, but part of "
                              f"the trip has already been flown.",
                              "Part of this trip has already been flown, which I cannot cancel, "
                              "so I transfer the user to a human agent.")
        return
    if cancellation_rule(res, s.reason or "other") is None:
        yield from o.say(_cancel_refusal(res, s.reason))
        return
    paid = yield from reckon_sum(o, [p["amount"] for p in res["payment_history"]],
                                 "I add up the payments of the reservation.")
    if not (yield from o.confirm(f"Here is what I will do: cancel reservation {rid} "
                                 f"({route_text(res)}). The refund of ${paid} goes back to the "
                                 f"original payment methods within 5 to 7 business days.")):
        return
    yield from o.call("cancel_reservation", {"reservation_id": rid},
                      f"The user confirmed, so I cancel reservation {rid}.")
    done = f"Reservation {rid} is cancelled; the refund reaches your original payment " \
           f"methods within 5 to 7 business days."
    if s.reason == "delay" and compensation_eligible(profile["membership"], res):
        amount = yield from _reckon_certificate(o, "delayed", len(res["passengers"]))
        yield from _offer_certificate(o, amount, DELAYED_FLIGHT_CREDIT,
                                      f"{done} Because your flight was delayed, I can")
        return
    yield from report(o, done)


def _reckon_certificate(o: OracleAgent, kind: Literal["cancelled", "delayed"], passengers: int) -> Script:
    return (yield from o.reckon(f"{compensation_amount(kind, 1)} * {passengers}", compensation_amount(kind, passengers),
                                "I work out the certificate: the amount per passenger times the passengers."))


def _offer_certificate(o: OracleAgent, amount: int, per_passenger: int, lead: str) -> Script:
    if not (yield from o.confirm(f"{lead} offer you a travel certificate of ${amount} "
                                 f"(${per_passenger} per passenger) as a gesture.")):
        return
    yield from o.call("send_certificate", {"user_id": o.scenario.user_id, "amount": amount},
                      "The user accepted the certificate, so I issue it.")
    yield from report(o, f"Done: a ${amount} travel certificate has been added to your profile.")


def plan_compensation(o: OracleAgent) -> Script:
    profile = yield from o.authenticate()
    res = yield from o.reservation("I'm sorry to hear about the cancelled flight. Which "
                                   "reservation was affected?")
    if not compensation_eligible(profile["membership"], res):
        yield from o.say(
            f"I'm sorry, but I cannot offer compensation for reservation "
            f"{res['reservation_id']}: certificates are only for silver or gold members, trips "
            f"with travel insurance, or business cabins.")
        return
    amount = yield from _reckon_certificate(o, "cancelled", len(res["passengers"]))
    yield from _offer_certificate(o, amount, CANCELLED_FLIGHT_CREDIT,
                                  "I'm sorry for the trouble. I can")
