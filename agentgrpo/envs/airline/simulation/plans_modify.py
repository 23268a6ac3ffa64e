"""The oracle's plans for changing a reservation: flights, cabin, bags, passengers.

Each reads the reservation, prices the change with the rules in ``policy``, states it,
waits for a "yes" and makes one update call; the requests the policy never allows
(adding insurance or a passenger after booking) are refused after reading it.
"""
from __future__ import annotations

from collections.abc import Callable

from agentgrpo.envs.airline.core.policy import BAG_FEE, TODAY, free_bags_per_passenger
from agentgrpo.envs.airline.simulation.oracle import OracleAgent, Script
from agentgrpo.envs.airline.simulation.plans_common import (
    CABIN_WORDS,
    ask_payment,
    bags_text,
    legs_text,
    money_text,
    options_text,
    pick_flight,
    quote_fare,
    report,
)


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
    yield from o.say(options_text(results, cabin, leg["origin"], leg["destination"], day))
    choice = pick_flight(results, s.flight_choices[0])
    quote_fare(o, choice, cabin)
    yield from ask_payment(o, profile, "the price difference")
    payment_id = s.payment_ids[0]
    travellers = len(res["passengers"])
    difference = yield from o.reckon(
        f"({choice['prices'][cabin]} - {leg['price']}) * {travellers}",
        (choice["prices"][cabin] - leg["price"]) * travellers,
        "I work out the price difference: new fare minus old fare, times the passengers.")
    flights = [{"flight_number": f["flight_number"], "date": f["date"]} for f in res["flights"]]
    flights[index] = {"flight_number": choice["flight_number"], "date": day}
    if not (yield from o.confirm(
            f"Here is the change: on reservation {rid}, replace {leg['flight_number']} on "
            f"{leg['date']} with {choice['flight_number']} on {day}, in {CABIN_WORDS[cabin]}. "
            f"{money_text(difference, payment_id)}")):
        return
    yield from o.call("update_reservation_flights", {
        "reservation_id": rid, "cabin": cabin, "flights": flights, "payment_id": payment_id},
        "The user confirmed, so I update the flights.")
    yield from report(o, f"Done: reservation {rid} now has {choice['flight_number']} on {day}. "
                         f"{money_text(difference, payment_id, done=True)}")


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
        found = pick_flight(results, leg["flight_number"])
        quote_fare(o, found, new)
        prices.append(found["prices"][new])
    yield from ask_payment(o, profile, "the price difference")
    payment_id = s.payment_ids[0]
    old_prices = [f["price"] for f in res["flights"]]
    travellers = len(res["passengers"])
    difference = yield from o.reckon(
        f"({' + '.join(str(p) for p in prices)} - {' - '.join(str(p) for p in old_prices)}) * {travellers}",
        (sum(prices) - sum(old_prices)) * travellers,
        "I work out the price difference: new fares minus old fares, times the passengers.")
    flights = [{"flight_number": f["flight_number"], "date": f["date"]} for f in res["flights"]]
    if not (yield from o.confirm(
            f"Here is the change: move reservation {rid} from {CABIN_WORDS[res['cabin']]} to "
            f"{CABIN_WORDS[new]} on all its flights ({legs_text(res)}). "
            f"{money_text(difference, payment_id)}")):
        return
    yield from o.call("update_reservation_flights", {
        "reservation_id": rid, "cabin": new, "flights": flights, "payment_id": payment_id},
        "The user confirmed, so I change the cabin.")
    yield from report(o, f"Done: reservation {rid} is now in {CABIN_WORDS[new]}. "
                         f"{money_text(difference, payment_id, done=True)}")


def plan_add_bags(o: OracleAgent) -> Script:
    s = o.scenario
    profile = yield from o.authenticate()
    res = yield from o.reservation("Which reservation is it, and how many checked bags would "
                                   "you like to add?")
    rid, added = res["reservation_id"], s.bags or 1
    travellers, per_passenger = len(res["passengers"]), free_bags_per_passenger(profile["membership"], res["cabin"])
    yield from ask_payment(o, profile, "the bag fees")
    payment_id = s.payment_ids[0]
    total = yield from o.reckon(f"{res['total_baggages']} + {added}", res["total_baggages"] + added,
                                "I add the new bags to the bags the reservation has.")
    allowance = yield from o.reckon(f"{per_passenger} * {travellers}", per_passenger * travellers,
                                    "I work out the free bags: the membership's per passenger, times the passengers.")
    nonfree = max(res["nonfree_baggages"], total - allowance)
    paid = nonfree - res["nonfree_baggages"]
    if paid:  # bags over the allowance that were not paid for already
        paid = yield from o.reckon(f"{total} - {allowance} - {res['nonfree_baggages']}", paid,
                                   "I work out the new bags over the free ones.")
        fee = yield from o.reckon(f"{BAG_FEE} * {paid}", BAG_FEE * paid, "I work out the bag fee.")
    cost = (f"{paid} of the new ones cost $50 each, ${fee} in total, charged to {payment_id}." if paid else
            f"the new ones are free (payment method {payment_id}).")
    if not (yield from o.confirm(
            f"Here is the change: add {bags_text(added)} to reservation {rid}, for a total of "
            f"{bags_text(total)}. Your {profile['membership']} membership gives {allowance} "
            f"free checked bags on this reservation, so {cost}")):
        return
    yield from o.call("update_reservation_baggages", {
        "reservation_id": rid, "total_baggages": total, "nonfree_baggages": nonfree,
        "payment_id": payment_id}, "The user confirmed, so I update the bags.")
    yield from report(o, f"Done: reservation {rid} now has {bags_text(total)}.")


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
    yield from report(o, f"Done: the passenger details on reservation {rid} are updated.")


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
