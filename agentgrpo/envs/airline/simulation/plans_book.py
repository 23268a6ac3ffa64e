"""The oracle's plans for new bookings, information questions and transfers.

``plan_book`` searches each leg, collects passengers, bags and insurance, quotes the
price, splits it over the user's payment methods within the limits and books after a
"yes"; ``plan_info`` answers from the profile and reservations; ``plan_transfer`` hands
an out-of-scope request to a human agent with a summary.
"""
from __future__ import annotations

from typing import Any

from agentgrpo.envs.airline.core.policy import (
    BAG_FEE,
    INSURANCE_PER_PASSENGER,
    TODAY,
    booking_price,
    nonfree_bags,
    payment_limit_violation,
    split_payment,
)
from agentgrpo.envs.airline.simulation.dialogue import spoken_date
from agentgrpo.envs.airline.simulation.oracle import Abort, OracleAgent, Script
from agentgrpo.envs.airline.simulation.plans_common import (
    CABIN_WORDS,
    SOURCE_WORDS,
    bags_text,
    options_text,
    pick_flight,
    quote_fare,
    reckon_split,
    reckon_sum,
    report,
    route_text,
)
from agentgrpo.envs.airline.simulation.scenario import transfer_summary


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
        yield from o.say(options_text(results, cabin, origin, destination, day))
        chosen.append({**pick_flight(results, number), "date": day})
        quote_fare(o, chosen[-1], cabin)
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
    yield from report(o, f"Done: your reservation {booked['reservation_id']} is booked.")


def _booking_payment(o: OracleAgent, profile: dict, chosen: list[dict], cabin: str) -> Script:
    """Quote the total, collect payment methods (enforcing the limits), split the price."""
    s = o.scenario
    travellers = len(s.passengers)
    nonfree = nonfree_bags(profile["membership"], cabin, travellers, s.bags or 0)
    fares = [c["prices"][cabin] for c in chosen]
    total = booking_price(fares, travellers, s.insurance or "no", nonfree)
    expression = (f"({' + '.join(str(f) for f in fares)}) * {travellers}" if len(fares) > 1
                  else f"{fares[0]} * {travellers}")
    expression += f" + {INSURANCE_PER_PASSENGER} * {travellers}" if s.insurance == "yes" else ""
    expression += f" + {BAG_FEE} * {nonfree}" if nonfree else ""
    total = yield from o.reckon(expression, total, "I add up the total: the fares for each passenger, "
                                                   "then insurance and paid bags.")
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
    yield from reckon_split(o, total, plan, methods)
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
            f"{bags_text(action['total_baggages'])} ({action['nonfree_baggages']} paid at $50 "
            f"each), {insured}. Total ${total}, paid with {paid}.")


def plan_info(o: OracleAgent) -> Script:
    s = o.scenario
    profile = yield from o.authenticate()
    if s.question == "gift_card_balance":
        cards = [(pid, m["amount"]) for pid, m in profile["payment_methods"].items()
                 if m["source"] == "gift_card"]
        listing = ", ".join(f"{pid} with ${amount}" for pid, amount in cards)
        together = yield from reckon_sum(o, [a for _, a in cards], "I add up the gift card balances.")
        yield from o.say(f"You have {len(cards)} gift cards: {listing}. Together that is ${together}.")
    elif s.question == "reservation_total":
        res = yield from o.reservation("Which reservation would you like to know about?")
        payments = ", ".join(f"${p['amount']} with {p['payment_id']}"
                             for p in res["payment_history"])
        total = yield from reckon_sum(o, [p["amount"] for p in res["payment_history"]],
                                      "I add up the payments of the reservation.")
        yield from o.say(f"For reservation {res['reservation_id']} ({route_text(res)}) you paid "
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
