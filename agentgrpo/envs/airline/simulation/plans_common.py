"""What the oracle's plans share: the wording of trips, money and flights, and small steps.

Messages are short and always phrased the same way, because a learned policy imitates
them and the scripted user must understand the imitation. The ``*_text`` helpers word a
reservation, bags, a price difference or search results; ``pick_flight``, ``ask_payment``
and ``report`` are steps every family of plans (``plans_book``, ``plans_cancel``,
``plans_modify``) takes.
"""
from __future__ import annotations

from typing import Any

from agentgrpo.envs.airline.simulation.oracle import CLOSING, Abort, OracleAgent, Script

CABIN_WORDS = {"basic_economy": "basic economy", "economy": "economy", "business": "business"}
SOURCE_WORDS = {"certificate": "travel certificate", "credit_card": "credit card",
                "gift_card": "gift card"}


# ---- wording -----------------------------------------------------------------------
def legs_text(reservation: dict[str, Any]) -> str:
    """A reservation's flights: 'HAT001 on 2024-05-20 and ...'."""
    return " and ".join(f"{f['flight_number']} on {f['date']}" for f in reservation["flights"])


def route_text(reservation: dict[str, Any]) -> str:
    """A reservation's route, trip type and flights."""
    kind = "round trip" if reservation["flight_type"] == "round_trip" else "one way"
    return f"{reservation['origin']} to {reservation['destination']}, {kind}, {legs_text(reservation)}"


def methods_text(profile: dict[str, Any], allow_certificates: bool) -> str:
    """The profile's payment methods, each with what identifies it to the user."""
    parts = []
    for pid, method in profile["payment_methods"].items():
        if method["source"] == "credit_card":
            parts.append(f"{pid} ({method['brand']} ending {method['last_four']})")
        elif method["source"] == "gift_card":
            parts.append(f"{pid} (balance ${method['amount']})")
        elif allow_certificates:
            parts.append(f"{pid} (certificate worth ${method['amount']})")
    return ", ".join(parts)


def bags_text(count: int) -> str:
    """'1 checked bag', '3 checked bags'."""
    return f"{count} checked bag{'' if count == 1 else 's'}"


def money_text(difference: int, payment_id: str, done: bool = False) -> str:
    """Who pays or gets back a price difference, before (or, ``done``, after) the change."""
    if difference > 0:
        verb = "was charged" if done else "will be charged"
        return f"The difference of ${difference} {verb} to {payment_id}."
    if difference < 0:
        verb = "was refunded" if done else "will be refunded"
        return f"The difference of ${-difference} {verb} to {payment_id}."
    return f"There is no price difference (payment method {payment_id})."


def options_text(results: list[dict[str, Any]], cabin: str, origin: str, destination: str,
                 day: str) -> str:
    """Direct-flight search results with times and fares, and the question which one."""
    lines = [f"{r['flight_number']} (departs {r['scheduled_departure_time_est'][:5]}, arrives "
             f"{r['scheduled_arrival_time_est'][:5]}, {CABIN_WORDS[cabin]} "
             f"${r['prices'][cabin]})" for r in results]
    return (f"Here are the direct flights from {origin} to {destination} on {day}: "
            f"{'; '.join(lines)}. Which flight would you like?")


def quote_fare(o: OracleAgent, flight: dict[str, Any], cabin: str) -> None:
    """With ``env.oracle_arithmetic=quoted``: the oracle's next words open with the chosen flight's
    fare, so the sum that needs it copies it from one sentence, not from a search result's table."""
    o.quote(f"The fare of {flight['flight_number']} in {CABIN_WORDS[cabin]} is ${flight['prices'][cabin]}.")


# ---- steps every plan takes ---------------------------------------------------------
def pick_flight(results: list[dict[str, Any]], number: str) -> dict[str, Any]:
    """The search result the user chose; a choice not among them aborts the dialogue."""
    for result in results:
        if result["flight_number"] == number:
            return result
    raise Abort(f"The flight {number} the user chose is not in the search results.")


def ask_payment(o: OracleAgent, profile: dict, purpose: str) -> Script:
    """Ask which of the profile's payment methods pays for ``purpose``."""
    yield from o.say(f"Which payment method from your profile should I use for {purpose}? "
                     f"You have {methods_text(profile, allow_certificates=False)}.")


def reckon_sum(o: OracleAgent, amounts: list[int], reason: str) -> Script:
    """The sum of ``amounts`` (``OracleAgent.reckon``: calculated when there is something to add)."""
    total = sum(amounts)
    if len(amounts) < 2:
        return total
    return (yield from o.reckon(" + ".join(str(a) for a in amounts), total, reason))


def reckon_split(o: OracleAgent, total: int, plan: list[dict[str, Any]], methods: dict[str, Any]) -> Script:
    """A split payment's last method pays what the others leave of ``total`` unless it pays its
    whole balance: that remainder is the one amount of ``plan`` that takes arithmetic."""
    last = plan[-1]
    if len(plan) < 2 or last["amount"] == methods[last["payment_id"]].get("amount"):
        return
    yield from o.reckon(" - ".join([str(total), *(str(p["amount"]) for p in plan[:-1])]), last["amount"],
                        f"I work out what {last['payment_id']} pays after the other methods.")


def report(o: OracleAgent, text: str) -> Script:
    """Tell the outcome and offer further help."""
    yield from o.say(f"{text} {CLOSING}")

