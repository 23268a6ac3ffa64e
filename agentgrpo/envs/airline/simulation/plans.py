"""The oracle's dialogues, one generator per scenario intent (see ``oracle``).

Every decision is made with the rules in ``policy`` from what the tools returned;
the scenario only supplies what the user has just said. Messages are short and
always phrased the same way, because a learned policy imitates them and the
scripted user must understand the imitation.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentgrpo.envs.airline.core.policy import (
    BAG_FEE,
    CANCELLED_FLIGHT_CREDIT,
    DELAYED_FLIGHT_CREDIT,
    TODAY,
    booking_price,
    cancellation_rule,
    compensation_amount,
    compensation_eligible,
    free_bags_per_passenger,
    has_flown_segment,
    nonfree_bags,
    payment_limit_violation,
    split_payment,
)
from agentgrpo.envs.airline.simulation.dialogue import spoken_date
from agentgrpo.envs.airline.simulation.oracle import CLOSING, Abort, OracleAgent, Plan, Script
from agentgrpo.envs.airline.simulation.scenario import transfer_summary
from agentgrpo.envs.types import Task

CABIN_WORDS = {"basic_economy": "basic economy", "economy": "economy", "business": "business"}
SOURCE_WORDS = {"certificate": "travel certificate", "credit_card": "credit card",
                "gift_card": "gift card"}


# ---- wording helpers ---------------------------------------------------------------
def _legs(reservation: dict[str, Any]) -> str:
    return " and ".join(f"{f['flight_number']} on {f['date']}" for f in reservation["flights"])


def _route(reservation: dict[str, Any]) -> str:
    kind = "round trip" if reservation["flight_type"] == "round_trip" else "one way"
    return f"{reservation['origin']} to {reservation['destination']}, {kind}, {_legs(reservation)}"


def _methods(profile: dict[str, Any], allow_certificates: bool) -> str:
    parts = []
    for pid, method in profile["payment_methods"].items():
        if method["source"] == "credit_card":
            parts.append(f"{pid} ({method['brand']} ending {method['last_four']})")
        elif method["source"] == "gift_card":
            parts.append(f"{pid} (balance ${method['amount']})")
        elif allow_certificates:
            parts.append(f"{pid} (certificate worth ${method['amount']})")
    return ", ".join(parts)


def _bags(count: int) -> str:
    return f"{count} checked bag{'' if count == 1 else 's'}"


def _money(difference: int, payment_id: str, done: bool = False) -> str:
    if difference > 0:
        verb = "was charged" if done else "will be charged"
        return f"The difference of ${difference} {verb} to {payment_id}."
    if difference < 0:
        verb = "was refunded" if done else "will be refunded"
        return f"The difference of ${-difference} {verb} to {payment_id}."
    return f"There is no price difference (payment method {payment_id})."


def _options(results: list[dict[str, Any]], cabin: str, origin: str, destination: str,
             day: str) -> str:
    lines = [f"{r['flight_number']} (departs {r['scheduled_departure_time_est'][:5]}, arrives "
             f"{r['scheduled_arrival_time_est'][:5]}, {CABIN_WORDS[cabin]} "
             f"${r['prices'][cabin]})" for r in results]
    return (f"Here are the direct flights from {origin} to {destination} on {day}: "
            f"{'; '.join(lines)}. Which flight would you like?")


def _pick(results: list[dict[str, Any]], number: str) -> dict[str, Any]:
    for result in results:
        if result["flight_number"] == number:
            return result
    raise Abort(f"The flight {number} the user chose is not in the search results.")


def _payment_question(o: OracleAgent, profile: dict, purpose: str) -> Script:
    yield from o.say(f"Which payment method from your profile should I use for {purpose}? "
                     f"You have {_methods(profile, allow_certificates=False)}.")


def _report(o: OracleAgent, text: str) -> Script:
    yield from o.say(f"{text} {CLOSING}")


# ---- cancel (and delayed-flight compensation) ------------------------------------------
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
    paid = sum(p["amount"] for p in res["payment_history"])
    if not (yield from o.confirm(f"Here is what I will do: cancel reservation {rid} "
                                 f"({_route(res)}). The refund of ${paid} goes back to the "
                                 f"original payment methods within 5 to 7 business days.")):
        return
    yield from o.call("cancel_reservation", {"reservation_id": rid},
                      f"The user confirmed, so I cancel reservation {rid}.")
    done = f"Reservation {rid} is cancelled; the refund reaches your original payment " \
           f"methods within 5 to 7 business days."
    if s.reason == "delay" and compensation_eligible(profile["membership"], res):
        amount = compensation_amount("delayed", len(res["passengers"]))
        yield from _offer_certificate(o, amount, DELAYED_FLIGHT_CREDIT,
                                      f"{done} Because your flight was delayed, I can")
        return
    yield from _report(o, done)


def _offer_certificate(o: OracleAgent, amount: int, per_passenger: int, lead: str) -> Script:
    if not (yield from o.confirm(f"{lead} offer you a travel certificate of ${amount} "
                                 f"(${per_passenger} per passenger) as a gesture.")):
        return
    yield from o.call("send_certificate", {"user_id": o.scenario.user_id, "amount": amount},
                      "The user accepted the certificate, so I issue it.")
    yield from _report(o, f"Done: a ${amount} travel certificate has been added to your profile.")


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
    amount = compensation_amount("cancelled", len(res["passengers"]))
    yield from _offer_certificate(o, amount, CANCELLED_FLIGHT_CREDIT,
                                  "I'm sorry for the trouble. I can")


# ---- changes to a reservation ---------------------------------------------------------
def plan_change_flight(o: OracleAgent) -> Script:
    s = o.scenario
    profile = yield from o.authenticate()
    res = yield from o.reservation("Which reservation would you like to change, and what "
                                   "change would you like to make?")
    rid, cabin = res["reservation_id"], res["cabin"]
    if cabin == "basic_economy":
        yield from o.say(f"I'm sorry, but I cannot change the flights of reservation {rid}: "
                         f"basic economy flights cannot be modified.")
        return
    index = 1 if s.change_leg == "return" else 0
    leg, day = res["flights"][index], s.new_date or TODAY
    results = yield from o.read("search_direct_flight", {
        "origin": leg["origin"], "destination": leg["destination"], "date": day},
        f"I search direct flights from {leg['origin']} to {leg['destination']} on {day}.")
    yield from o.say(_options(results, cabin, leg["origin"], leg["destination"], day))
    choice = _pick(results, s.flight_choices[0])
    yield from _payment_question(o, profile, "the price difference")
    payment_id = s.payment_ids[0]
    difference = (choice["prices"][cabin] - leg["price"]) * len(res["passengers"])
    flights = [{"flight_number": f["flight_number"], "date": f["date"]} for f in res["flights"]]
    flights[index] = {"flight_number": choice["flight_number"], "date": day}
    if not (yield from o.confirm(
            f"Here is the change: on reservation {rid}, replace {leg['flight_number']} on "
            f"{leg['date']} with {choice['flight_number']} on {day}, in {CABIN_WORDS[cabin]}. "
            f"{_money(difference, payment_id)}")):
        return
    yield from o.call("update_reservation_flights", {
        "reservation_id": rid, "cabin": cabin, "flights": flights, "payment_id": payment_id},
        "The user confirmed, so I update the flights.")
    yield from _report(o, f"Done: reservation {rid} now has {choice['flight_number']} on {day}. "
                          f"{_money(difference, payment_id, done=True)}")


def plan_change_cabin(o: OracleAgent) -> Script:
    s = o.scenario
    profile = yield from o.authenticate()
    res = yield from o.reservation("Which reservation would you like to change, and which "
                                   "cabin would you like?")
    rid, new = res["reservation_id"], s.cabin or "economy"
    prices = []
    for leg in res["flights"]:
        results = yield from o.read("search_direct_flight", {
            "origin": leg["origin"], "destination": leg["destination"], "date": leg["date"]},
            f"I look up today's {CABIN_WORDS[new]} price of {leg['flight_number']}.")
        prices.append(_pick(results, leg["flight_number"])["prices"][new])
    yield from _payment_question(o, profile, "the price difference")
    payment_id = s.payment_ids[0]
    old_total = sum(f["price"] for f in res["flights"])
    difference = (sum(prices) - old_total) * len(res["passengers"])
    flights = [{"flight_number": f["flight_number"], "date": f["date"]} for f in res["flights"]]
    if not (yield from o.confirm(
            f"Here is the change: move reservation {rid} from {CABIN_WORDS[res['cabin']]} to "
            f"{CABIN_WORDS[new]} on all its flights ({_legs(res)}). "
            f"{_money(difference, payment_id)}")):
        return
    yield from o.call("update_reservation_flights", {
        "reservation_id": rid, "cabin": new, "flights": flights, "payment_id": payment_id},
        "The user confirmed, so I change the cabin.")
    yield from _report(o, f"Done: reservation {rid} is now in {CABIN_WORDS[new]}. "
                          f"{_money(difference, payment_id, done=True)}")


def plan_add_bags(o: OracleAgent) -> Script:
    s = o.scenario
    profile = yield from o.authenticate()
    res = yield from o.reservation("Which reservation is it, and how many checked bags would "
                                   "you like to add?")
    rid, added = res["reservation_id"], s.bags or 1
    travellers = len(res["passengers"])
    allowance = free_bags_per_passenger(profile["membership"], res["cabin"]) * travellers
    total = res["total_baggages"] + added
    nonfree = max(res["nonfree_baggages"], total - allowance)
    fee = BAG_FEE * (nonfree - res["nonfree_baggages"])
    yield from _payment_question(o, profile, "the bag fees")
    payment_id = s.payment_ids[0]
    cost = (f"{nonfree - res['nonfree_baggages']} of the new ones cost $50 each, ${fee} in "
            f"total, charged to {payment_id}." if fee else
            f"the new ones are free (payment method {payment_id}).")
    if not (yield from o.confirm(
            f"Here is the change: add {_bags(added)} to reservation {rid}, for a total of "
            f"{_bags(total)}. Your {profile['membership']} membership gives {allowance} "
            f"free checked bags on this reservation, so {cost}")):
        return
    yield from o.call("update_reservation_baggages", {
        "reservation_id": rid, "total_baggages": total, "nonfree_baggages": nonfree,
        "payment_id": payment_id}, "The user confirmed, so I update the bags.")
    yield from _report(o, f"Done: reservation {rid} now has {_bags(total)}.")


def plan_update_passengers(o: OracleAgent) -> Script:
    s = o.scenario
    yield from o.authenticate()
    res = yield from o.reservation("Which reservation is it, and what needs to be corrected?")
    rid, update = res["reservation_id"], s.passenger_update or {}
    passengers = [dict(p) for p in res["passengers"]]
    old, new = passengers[update["index"]], update["new"]
    passengers[update["index"]] = dict(new)
    if not (yield from o.confirm(
            f"Here is the change: on reservation {rid}, passenger {old['first_name']} "
            f"{old['last_name']} (born {old['dob']}) becomes {new['first_name']} "
            f"{new['last_name']} (born {new['dob']}). The other passengers stay the same.")):
        return
    yield from o.call("update_reservation_passengers", {"reservation_id": rid,
                                                        "passengers": passengers},
                      "The user confirmed, so I update the passenger.")
    yield from _report(o, f"Done: the passenger details on reservation {rid} are updated.")


def _plan_refusal(message: Callable[[dict], str]) -> Callable[[OracleAgent], Script]:
    """A request the policy always refuses: read the reservation, then say why not."""
    def plan(o: OracleAgent) -> Script:
        yield from o.authenticate()
        res = yield from o.reservation("Which reservation is it? Please give me its "
                                       "reservation id.")
        yield from o.say(message(res))
    return plan


plan_add_insurance = _plan_refusal(
    lambda res: f"I'm sorry, but travel insurance cannot be added to reservation "
                f"{res['reservation_id']}: insurance can only be bought when a reservation is "
                f"booked, not afterwards.")
plan_add_passenger = _plan_refusal(
    lambda res: f"I'm sorry, but I cannot add a passenger to reservation "
                f"{res['reservation_id']}: the number of passengers on a reservation can never "
                f"change, not even by a human agent.")


# ---- bookings, information and transfers ------------------------------------------------
def plan_book(o: OracleAgent) -> Script:
    s = o.scenario
    trip = s.trip or {}
    profile = yield from o.authenticate()
    yield from o.say("Where would you like to fly from and to, is it a one-way or round trip, "
                     "on which dates, and in which cabin?")
    cabin, ends = trip["cabin"], [(trip["origin"], trip["destination"]),
                                  (trip["destination"], trip["origin"])]
    chosen = []
    for (origin, destination), day, number in zip(ends, trip["dates"], s.flight_choices):
        results = yield from o.read("search_direct_flight", {
            "origin": origin, "destination": destination, "date": day},
            f"I search direct flights from {origin} to {destination} on {day}.")
        yield from o.say(_options(results, cabin, origin, destination, day))
        chosen.append({**_pick(results, number), "date": day})
    yield from o.say("Please give me the first name, last name and date of birth of each "
                     "passenger.")
    yield from o.say("How many checked bags will you bring, and would you like travel "
                     "insurance for $30 per passenger?")
    plan, total, nonfree = yield from _booking_payment(o, profile, chosen, cabin)
    action = {"user_id": s.user_id, "origin": trip["origin"], "destination": trip["destination"],
              "flight_type": trip["flight_type"], "cabin": cabin,
              "flights": [{"flight_number": c["flight_number"], "date": c["date"]}
                          for c in chosen],
              "passengers": [dict(p) for p in s.passengers], "payment_methods": plan,
              "total_baggages": s.bags, "nonfree_baggages": nonfree, "insurance": s.insurance}
    if not (yield from o.confirm(_booking_summary(action, total))):
        return
    booked = yield from o.read("book_reservation", action,
                               "The user confirmed, so I make the booking.")
    yield from _report(o, f"Done: your reservation {booked['reservation_id']} is booked.")


def _booking_payment(o: OracleAgent, profile: dict, chosen: list[dict], cabin: str) -> Script:
    """Quote the total, collect payment methods (enforcing the limits), split the price."""
    s = o.scenario
    travellers = len(s.passengers)
    nonfree = nonfree_bags(profile["membership"], cabin, travellers, s.bags or 0)
    total = booking_price([c["prices"][cabin] for c in chosen], travellers,
                          s.insurance or "no", nonfree)
    yield from o.say(f"The total comes to ${total}. Which payment methods would you like to "
                     f"use? A reservation can use at most one travel certificate, one credit "
                     f"card and three gift cards from your profile.")
    methods = profile["payment_methods"]
    if s.rejected_payment_ids:
        broken = payment_limit_violation([methods[p]["source"] for p in s.rejected_payment_ids])
        limited = SOURCE_WORDS[broken or "certificate"]
        yield from o.say(f"A reservation can use at most one {limited}. Which payment methods "
                         f"would you like to use instead?")
    plan = split_payment(total, [methods[p] for p in s.payment_ids])
    if plan is None:
        raise Abort("The user's payment methods cannot cover the booking.")
    return plan, total, nonfree


def _booking_summary(action: dict[str, Any], total: int) -> str:
    kind = "round trip" if action["flight_type"] == "round_trip" else "one-way trip"
    legs = " and ".join(f"{f['flight_number']} on {f['date']}" for f in action["flights"])
    people = ", ".join(f"{p['first_name']} {p['last_name']} (born {p['dob']})"
                       for p in action["passengers"])
    insured = ("with travel insurance ($30 per passenger)" if action["insurance"] == "yes"
               else "no travel insurance")
    paid = ", ".join(f"{p['payment_id']} ${p['amount']}" for p in action["payment_methods"])
    return (f"Here is the booking: a {kind} from {action['origin']} to {action['destination']} "
            f"in {CABIN_WORDS[action['cabin']]}, {legs}. Passengers: {people}. "
            f"{_bags(action['total_baggages'])} ({action['nonfree_baggages']} paid at $50 "
            f"each), {insured}. Total ${total}, paid with {paid}.")


def plan_info(o: OracleAgent) -> Script:
    s = o.scenario
    profile = yield from o.authenticate()
    if s.question == "gift_card_balance":
        cards = [(pid, m["amount"]) for pid, m in profile["payment_methods"].items()
                 if m["source"] == "gift_card"]
        listing = ", ".join(f"{pid} with ${amount}" for pid, amount in cards)
        yield from o.say(f"You have {len(cards)} gift cards: {listing}. Together that is "
                         f"${sum(a for _, a in cards)}.")
    elif s.question == "reservation_total":
        res = yield from o.reservation("Which reservation would you like to know about?")
        payments = ", ".join(f"${p['amount']} with {p['payment_id']}"
                             for p in res["payment_history"])
        total = sum(p["amount"] for p in res["payment_history"])
        yield from o.say(f"For reservation {res['reservation_id']} ({_route(res)}) you paid "
                         f"${total} in total ({payments}).")
    else:
        upcoming = []
        for rid in profile["reservations"]:
            res = yield from o.read("get_reservation_details", {"reservation_id": rid},
                                    f"I check whether reservation {rid} has started.")
            if res.get("status") != "cancelled" and all(f["date"] > TODAY for f in res["flights"]):
                upcoming.append(rid)
        names = f": {', '.join(upcoming)}" if upcoming else ""
        yield from o.say(f"I checked all {len(profile['reservations'])} of your reservations. "
                         f"You have {len(upcoming)} reservations that have not started yet "
                         f"(every flight after today, {spoken_date(TODAY)}){names}.")


def plan_transfer(o: OracleAgent) -> Script:
    s = o.scenario
    yield from o.authenticate()
    yield from o.transfer(transfer_summary(s.user_id, s.request or "lost_item"),
                          "None of my tools can handle this request, so it is outside what I "
                          "can do: I transfer the user to a human agent with a summary.")


PLANS: dict[str, Plan] = {
    "cancel": plan_cancel,
    "compensation": plan_compensation,
    "change_flight": plan_change_flight,
    "change_cabin": plan_change_cabin,
    "add_bags": plan_add_bags,
    "update_passengers": plan_update_passengers,
    "add_insurance": plan_add_insurance,
    "add_passenger": plan_add_passenger,
    "book": plan_book,
    "info": plan_info,
    "transfer": plan_transfer,
}


def oracle_agent(domain: Any, task: Task) -> OracleAgent:
    """The oracle for a generated ``task``, following the plan of its scenario's intent."""
    return OracleAgent(domain, task, PLANS)
