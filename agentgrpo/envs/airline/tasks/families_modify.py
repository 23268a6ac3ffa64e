"""Task families about changing an existing reservation.

Flight changes (and the basic-economy refusal), cabin changes, adding bags,
correcting a passenger, and two requests the policy always refuses: adding insurance
after booking and changing the number of passengers.
"""
from __future__ import annotations

from datetime import date, timedelta

from agentgrpo.envs.airline.core.policy import BAG_FEE, CABINS, TODAY, free_bags_per_passenger
from agentgrpo.envs.airline.simulation.dialogue import spoken_date
from agentgrpo.envs.airline.simulation.scenario import Confirmation, Scenario
from agentgrpo.envs.airline.tasks.common import (
    PREFERENCES,
    FamilyContext,
    NoCandidate,
    TaskDraft,
    all_bookable,
    all_future,
    choose_flight,
    describe_method,
    direct_options,
    family,
    flight_refs,
    flights_confirmation,
    full_name,
    is_active,
    is_direct_trip,
    payers,
    preference_phrase,
    trip_words,
)
from agentgrpo.envs.airline.tasks.world import FIRST_NAMES, LAST_NAMES
from agentgrpo.envs.types import Action

ACCEPT_ANSWER = "If the agent says it cannot be done, you accept that and end the conversation."


def _rid(reservation: dict) -> str:
    return reservation["reservation_id"]


def _untouched(r: dict) -> bool:
    return is_active(r) and all_future(r)


def _future_days(ctx: FamilyContext) -> list[str]:
    any_flight = next(iter(ctx.world["flights"].values()))
    return sorted(d for d in any_flight["dates"] if d > TODAY)


def _moved_leg(ctx: FamilyContext, reservation: dict, preference: str) -> tuple[int, dict]:
    """Which leg moves and the flight the user picks on its new date."""
    legs = reservation["flights"]
    index = ctx.rng.randrange(len(legs))
    leg = legs[index]
    low = legs[0]["date"] if index == 1 else TODAY
    high = legs[1]["date"] if index == 0 and len(legs) == 2 else "9999-12-31"
    days = [d for d in _future_days(ctx) if low < d < high and d != leg["date"]]
    ctx.rng.shuffle(days)
    for day in days:
        options = direct_options(ctx, leg["origin"], leg["destination"], day,
                                 reservation["cabin"], len(reservation["passengers"]))
        try:
            return index, choose_flight(options, preference)
        except NoCandidate:
            continue
    raise NoCandidate


def _change_flight_task(ctx: FamilyContext, basic_economy: bool, name: str) -> TaskDraft:
    def fits(r: dict, _u: dict) -> bool:
        return (_untouched(r) and is_direct_trip(r) and all_bookable(ctx, r)
                and (r["cabin"] == "basic_economy") == basic_economy)
    reservation = ctx.pick(ctx.reservations(fits), _rid)
    uid, rid, cabin = reservation["user_id"], reservation["reservation_id"], reservation["cabin"]
    user = ctx.user(uid)
    preference = ctx.rng.choice(PREFERENCES)
    index, choice = _moved_leg(ctx, reservation, preference)
    new_flights = flight_refs(reservation["flights"])
    new_flights[index] = {"flight_number": choice["flight_number"], "date": choice["date"]}
    travellers = len(reservation["passengers"])
    difference = (choice["price"] - reservation["flights"][index]["price"]) * travellers
    payment_id = ctx.rng.choice(payers(user, difference) or [""])
    if not payment_id:
        raise NoCandidate
    action = Action("update_reservation_flights", {"reservation_id": rid, "cabin": cabin,
                                                   "flights": new_flights,
                                                   "payment_id": payment_id})
    leg_name = "only" if len(reservation["flights"]) == 1 else ("return" if index else "outbound")
    confirmation = flights_confirmation(reservation, cabin, new_flights, payment_id, difference)
    scenario = Scenario(
        family=name, intent="change_flight", expected="refusal" if basic_economy else "write",
        user_id=uid, reservation_id=rid, preference=preference, change_leg=leg_name,
        new_date=choice["date"], flight_choices=[choice["flight_number"]],
        payment_ids=[payment_id], confirmations=[confirmation])
    which = "flight" if leg_name == "only" else f"{leg_name} flight"
    instruction = (
        f"Your user id is {uid}. For reservation {rid}, {trip_words(reservation)}, you want "
        f"to move the {which} to {spoken_date(choice['date'])}, keeping the same cabin. You "
        f"want {preference_phrase(preference, cabin)} that day. Pay any difference with "
        f"{describe_method(user, payment_id)}. {ACCEPT_ANSWER}")
    return TaskDraft(scenario, [] if basic_economy else [action], instruction)


@family("change_flight")
def change_flight(ctx: FamilyContext) -> TaskDraft:
    return _change_flight_task(ctx, basic_economy=False, name="change_flight")


@family("change_flight_basic_refused")
def change_flight_basic_refused(ctx: FamilyContext) -> TaskDraft:
    return _change_flight_task(ctx, basic_economy=True, name="change_flight_basic_refused")


def _seats_for(ctx: FamilyContext, reservation: dict, cabin: str) -> bool:
    travellers = len(reservation["passengers"])
    return all(ctx.world["flights"][s["flight_number"]]["dates"][s["date"]]["available_seats"]
               [cabin] >= travellers for s in reservation["flights"])


@family("change_cabin")
def change_cabin(ctx: FamilyContext) -> TaskDraft:
    reservation = ctx.pick(ctx.reservations(lambda r, _u: _untouched(r) and all_bookable(ctx, r)),
                           _rid)
    uid, rid = reservation["user_id"], reservation["reservation_id"]
    user = ctx.user(uid)
    cabins = [c for c in CABINS if c != reservation["cabin"] and _seats_for(ctx, reservation, c)]
    if not cabins:
        raise NoCandidate
    cabin = ctx.rng.choice(cabins)
    prices = [ctx.world["flights"][s["flight_number"]]["dates"][s["date"]]["prices"][cabin]
              for s in reservation["flights"]]
    travellers = len(reservation["passengers"])
    difference = (sum(prices) - sum(s["price"] for s in reservation["flights"])) * travellers
    methods = payers(user, difference)
    if not methods:
        raise NoCandidate
    payment_id = ctx.rng.choice(methods)
    refs = flight_refs(reservation["flights"])
    action = Action("update_reservation_flights", {"reservation_id": rid, "cabin": cabin,
                                                   "flights": refs, "payment_id": payment_id})
    scenario = Scenario(
        family="change_cabin", intent="change_cabin", expected="write", user_id=uid,
        reservation_id=rid, cabin=cabin, payment_ids=[payment_id],
        confirmations=[flights_confirmation(reservation, cabin, refs, payment_id, difference)])
    instruction = (
        f"Your user id is {uid}. You want to change the cabin of reservation {rid}, "
        f"{trip_words(reservation)}, to {cabin.replace('_', ' ')} on all its flights. Pay or "
        f"get refunded the difference with {describe_method(user, payment_id)}.")
    return TaskDraft(scenario, [action], instruction)


@family("add_bags")
def add_bags(ctx: FamilyContext) -> TaskDraft:
    reservation = ctx.pick(ctx.reservations(lambda r, _u: _untouched(r)), _rid)
    uid, rid = reservation["user_id"], reservation["reservation_id"]
    user = ctx.user(uid)
    added = ctx.rng.randint(1, 3)
    travellers = len(reservation["passengers"])
    allowance = free_bags_per_passenger(user["membership"], reservation["cabin"]) * travellers
    total = reservation["total_baggages"] + added
    nonfree = max(reservation["nonfree_baggages"], total - allowance)
    fee = BAG_FEE * (nonfree - reservation["nonfree_baggages"])
    methods = payers(user, fee)
    if not methods:
        raise NoCandidate
    payment_id = ctx.rng.choice(methods)
    action = Action("update_reservation_baggages", {
        "reservation_id": rid, "total_baggages": total, "nonfree_baggages": nonfree,
        "payment_id": payment_id})
    confirmation = Confirmation(
        "update_reservation_baggages", ["bag"],
        required={"reservation_id": [rid], "bag_count": [total], "payment_id": [payment_id]},
        allowed={"bag_count": sorted({added, allowance, nonfree,
                                      nonfree - reservation["nonfree_baggages"]}),
                 "amount": sorted({fee, BAG_FEE}), "reservation_id": [], "payment_id": []})
    scenario = Scenario(family="add_bags", intent="add_bags", expected="write", user_id=uid,
                        reservation_id=rid, bags=added, payment_ids=[payment_id],
                        confirmations=[confirmation])
    instruction = (
        f"Your user id is {uid}. You want to add {added} checked bag{'s' * (added > 1)} to "
        f"reservation {rid}, {trip_words(reservation)}. Pay any bag fee with "
        f"{describe_method(user, payment_id)}.")
    return TaskDraft(scenario, [action], instruction)


def _corrected(ctx: FamilyContext, person: dict[str, str]) -> tuple[dict[str, str], str]:
    """A corrected copy of a passenger and which field changed."""
    field = ctx.rng.choice(("first_name", "last_name", "dob"))
    fixed = dict(person)
    if field == "dob":
        shift = ctx.rng.choice((-400, -31, -1, 1, 31, 400))
        fixed["dob"] = (date.fromisoformat(person["dob"]) + timedelta(days=shift)).isoformat()
    else:
        names = FIRST_NAMES if field == "first_name" else LAST_NAMES
        fixed[field] = ctx.rng.choice([n for n in names if n != person[field]])
    return fixed, field


@family("update_passengers")
def update_passengers(ctx: FamilyContext) -> TaskDraft:
    reservation = ctx.pick(ctx.reservations(lambda r, _u: _untouched(r)), _rid)
    uid, rid = reservation["user_id"], reservation["reservation_id"]
    passengers = [dict(p) for p in reservation["passengers"]]
    index = ctx.rng.randrange(len(passengers))
    old = passengers[index]
    new, field = _corrected(ctx, old)
    passengers[index] = new
    action = Action("update_reservation_passengers", {"reservation_id": rid,
                                                      "passengers": passengers})
    dobs = sorted({p["dob"] for p in reservation["passengers"]} | {new["dob"]})
    confirmation = Confirmation(
        "update_reservation_passengers", ["passenger", "update", "change", "correct"],
        required={"reservation_id": [rid], **({"date": [new["dob"]]} if field == "dob" else {})},
        allowed={"date": dobs, "reservation_id": []}, names=[full_name(new)])
    scenario = Scenario(
        family="update_passengers", intent="update_passengers", expected="write", user_id=uid,
        reservation_id=rid, passenger_update={"index": index, "field": field, "old": old,
                                              "new": new},
        confirmations=[confirmation])
    what = {"first_name": f"the first name should be {new['first_name']}",
            "last_name": f"the last name should be {new['last_name']}",
            "dob": f"the date of birth should be {new['dob']}"}[field]
    instruction = (
        f"Your user id is {uid}. On reservation {rid} the passenger {full_name(old)} "
        f"(born {old['dob']}) has a mistake: {what}. You want it corrected; the other "
        f"passengers stay as they are.")
    return TaskDraft(scenario, [action], instruction)


@family("add_insurance_refused")
def add_insurance_refused(ctx: FamilyContext) -> TaskDraft:
    reservation = ctx.pick(
        ctx.reservations(lambda r, _u: _untouched(r) and r["insurance"] == "no"), _rid)
    uid, rid = reservation["user_id"], reservation["reservation_id"]
    scenario = Scenario(family="add_insurance_refused", intent="add_insurance",
                        expected="refusal", user_id=uid, reservation_id=rid, insurance="yes")
    instruction = (f"Your user id is {uid}. You want to add travel insurance to reservation "
                   f"{rid}, {trip_words(reservation)}. {ACCEPT_ANSWER}")
    return TaskDraft(scenario, [], instruction)


@family("add_passenger_refused")
def add_passenger_refused(ctx: FamilyContext) -> TaskDraft:
    reservation = ctx.pick(ctx.reservations(
        lambda r, u: _untouched(r) and len(r["passengers"]) < 5), _rid)
    uid, rid = reservation["user_id"], reservation["reservation_id"]
    born = date(1955, 1, 1) + timedelta(days=ctx.rng.randint(0, 50 * 365))
    companion = {"first_name": ctx.rng.choice(FIRST_NAMES),
                 "last_name": ctx.rng.choice(LAST_NAMES), "dob": born.isoformat()}
    scenario = Scenario(family="add_passenger_refused", intent="add_passenger",
                        expected="refusal", user_id=uid, reservation_id=rid,
                        passengers=[companion])
    instruction = (
        f"Your user id is {uid}. You want to add one more passenger, {full_name(companion)} "
        f"(born {companion['dob']}), to reservation {rid}, {trip_words(reservation)}. "
        f"{ACCEPT_ANSWER}")
    return TaskDraft(scenario, [], instruction)
