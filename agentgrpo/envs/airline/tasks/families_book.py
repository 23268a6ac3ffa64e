"""Task families about new bookings, information questions and out-of-scope requests.

Bookings exercise search, passengers, the bag allowance, insurance and the payment
rules (one certificate, one credit card, three gift cards, balances); one family
starts with a request that breaks a payment limit. Information questions are graded
by ``outputs``; the out-of-scope family must end in a transfer.
"""
from __future__ import annotations

from typing import Any

from agentgrpo.envs.airline.core.policy import (
    BAG_FEE,
    INSURANCE_PER_PASSENGER,
    TODAY,
    booking_price,
    nonfree_bags,
    split_payment,
)
from agentgrpo.envs.airline.simulation.dialogue import spoken_date
from agentgrpo.envs.airline.simulation.scenario import OUT_OF_SCOPE, Confirmation, Scenario, transfer_summary
from agentgrpo.envs.airline.tasks.common import (
    PREFERENCES,
    FamilyContext,
    NoCandidate,
    TaskDraft,
    all_future,
    choose_flight,
    describe_method,
    direct_options,
    family,
    full_name,
    is_active,
    preference_phrase,
)
from agentgrpo.envs.airline.tasks.world import AIRPORT_CITY
from agentgrpo.envs.types import Action


def _travellers(ctx: FamilyContext, user: dict[str, Any]) -> list[dict[str, str]]:
    me = {**user["name"], "dob": user["dob"]}
    count = min(1 + len(user["saved_passengers"]), ctx.rng.choice((1, 1, 2, 3)))
    return [me] + [dict(p) for p in user["saved_passengers"][: count - 1]]


def _payment_order(ctx: FamilyContext, user: dict[str, Any]) -> list[dict[str, Any]]:
    """A lawful preference order: one certificate, up to three gift cards, one card last."""
    methods = [user["payment_methods"][pid] for pid in sorted(user["payment_methods"])]
    certificates = [m for m in methods if m["source"] == "certificate"][:1]
    gift_cards = [m for m in methods if m["source"] == "gift_card"][:3]
    cards = [m for m in methods if m["source"] == "credit_card"]
    prepaid = certificates + gift_cards
    ctx.rng.shuffle(prepaid)
    chosen = prepaid[: ctx.rng.randint(0, len(prepaid))]
    return chosen + ([ctx.rng.choice(cards)] if cards else [])


def _over_limit(user: dict[str, Any]) -> list[str]:
    """Two methods of a kind limited to one per reservation (certificates, credit cards)."""
    for source in ("certificate", "credit_card"):
        same = sorted(pid for pid, m in user["payment_methods"].items() if m["source"] == source)
        if len(same) >= 2:
            return same[:2]
    return []


def _pick_days(ctx: FamilyContext, round_trip: bool) -> list[str]:
    any_flight = next(iter(ctx.world["flights"].values()))
    future = sorted(d for d in any_flight["dates"] if d > TODAY)
    out = ctx.rng.choice(future[:-2])
    if not round_trip:
        return [out]
    return [out, ctx.rng.choice([d for d in future if d > out][:4])]


def _book_task(ctx: FamilyContext, round_trip: bool, over_limit: bool, name: str) -> TaskDraft:
    users = ctx.world["users"]
    pool = sorted(uid for uid, u in users.items() if not over_limit or _over_limit(u))
    uid = ctx.pick(pool, lambda u: u)
    user = users[uid]
    routes = sorted({(f["origin"], f["destination"]) for f in ctx.world["flights"].values()})
    origin, destination = ctx.rng.choice(routes)
    days = _pick_days(ctx, round_trip)
    cabin = ctx.rng.choice(("basic_economy", "economy", "economy", "business"))
    travellers = _travellers(ctx, user)
    preference = ctx.rng.choice(PREFERENCES)
    ends = [(origin, destination), (destination, origin)]
    chosen = [choose_flight(direct_options(ctx, a, b, day, cabin, len(travellers)), preference)
              for (a, b), day in zip(ends, days)]
    bags = ctx.rng.randint(0, 2 * len(travellers))
    nonfree = nonfree_bags(user["membership"], cabin, len(travellers), bags)
    insurance = ctx.rng.choice(("yes", "no"))
    total = booking_price([c["price"] for c in chosen], len(travellers), insurance, nonfree)
    rejected = _over_limit(user) if over_limit else []
    if over_limit:  # fall back to the first of the two, then the lawful rest
        keep = [user["payment_methods"][rejected[0]]]
        others = [m for _, m in sorted(user["payment_methods"].items())
                  if m["source"] != keep[0]["source"]]
        order = keep + others
    else:
        order = _payment_order(ctx, user)
    plan = split_payment(total, order)
    if not plan:
        raise NoCandidate
    flights = [{"flight_number": c["flight_number"], "date": c["date"]} for c in chosen]
    action = Action("book_reservation", {
        "user_id": uid, "origin": origin, "destination": destination,
        "flight_type": "round_trip" if round_trip else "one_way", "cabin": cabin,
        "flights": flights, "passengers": travellers, "payment_methods": plan,
        "total_baggages": bags, "nonfree_baggages": nonfree, "insurance": insurance})
    trip = {"origin": origin, "destination": destination,
            "flight_type": "round_trip" if round_trip else "one_way", "dates": days,
            "cabin": cabin}
    scenario = Scenario(
        family=name, intent="book", expected="write", user_id=uid, trip=trip,
        preference=preference, flight_choices=[f["flight_number"] for f in flights],
        passengers=travellers, bags=bags, insurance=insurance,
        payment_ids=[p["payment_id"] for p in plan], rejected_payment_ids=rejected,
        confirmations=[_booking_confirmation(flights, cabin, travellers, plan, total, bags,
                                             nonfree, insurance)])
    return TaskDraft(scenario, [action],
                     _booking_instruction(user, uid, scenario, plan, rejected))


def _booking_confirmation(flights: list[dict], cabin: str, travellers: list[dict],
                          plan: list[dict], total: int, bags: int, nonfree: int,
                          insurance: str) -> Confirmation:
    amounts = {total, BAG_FEE, INSURANCE_PER_PASSENGER, BAG_FEE * nonfree,
               INSURANCE_PER_PASSENGER * len(travellers) * (insurance == "yes")}
    amounts |= {p["amount"] for p in plan}
    return Confirmation(
        "book_reservation", ["book"],
        required={"flight_number": sorted({f["flight_number"] for f in flights}),
                  "date": sorted({f["date"] for f in flights}), "cabin": [cabin],
                  "payment_id": sorted({p["payment_id"] for p in plan})},
        allowed={"amount": sorted(amounts), "date": sorted({p["dob"] for p in travellers}),
                 "bag_count": sorted({bags, nonfree}), "reservation_id": []},
        names=[full_name(p) for p in travellers])


def _booking_instruction(user: dict, uid: str, scenario: Scenario, plan: list[dict],
                         rejected: list[str]) -> str:
    trip = scenario.trip or {}
    days = [spoken_date(d) for d in trip["dates"]]
    where = (f"from {trip['origin']} ({AIRPORT_CITY[trip['origin']]}) to "
             f"{trip['destination']} ({AIRPORT_CITY[trip['destination']]})")
    when = f"leaving {days[0]}" + (f" and returning {days[1]}" if len(days) > 1 else "")
    kind = "a round trip" if len(days) > 1 else "a one-way trip"
    people = "; ".join(f"{full_name(p)} (born {p['dob']})" for p in scenario.passengers)
    pay = ", then ".join(describe_method(user, p["payment_id"]) for p in plan)
    first = (f"You first ask to pay with both {rejected[0]} and {rejected[1]}; if the agent "
             f"says only one of them can be used, you use {rejected[0]}. ") if rejected else ""
    return (
        f"Your user id is {uid}. You want to book {kind} {where}, {when}, in "
        f"{trip['cabin'].replace('_', ' ')}. Each way you want "
        f"{preference_phrase(scenario.preference or 'cheapest', trip['cabin'])}. The passengers "
        f"are: {people}. You have {scenario.bags} checked bags and you "
        f"{'want' if scenario.insurance == 'yes' else 'do not want'} travel insurance. "
        f"{first}You pay with {pay} (in that order, each as much as it can cover).")


@family("book_one_way")
def book_one_way(ctx: FamilyContext) -> TaskDraft:
    return _book_task(ctx, round_trip=False, over_limit=False, name="book_one_way")


@family("book_round_trip")
def book_round_trip(ctx: FamilyContext) -> TaskDraft:
    return _book_task(ctx, round_trip=True, over_limit=False, name="book_round_trip")


@family("book_payment_limit")
def book_payment_limit(ctx: FamilyContext) -> TaskDraft:
    return _book_task(ctx, round_trip=ctx.rng.random() < 0.5, over_limit=True,
                      name="book_payment_limit")


def _info_task(name: str, uid: str, question: str, answer: str, instruction: str,
               reservation_id: str | None = None) -> TaskDraft:
    scenario = Scenario(family=name, intent="info", expected="answer", user_id=uid,
                        reservation_id=reservation_id, question=question, answer=[answer])
    return TaskDraft(scenario, [], instruction, outputs=[answer])


@family("info_gift_card_balance")
def info_gift_card_balance(ctx: FamilyContext) -> TaskDraft:
    users = ctx.world["users"]
    def cards(u: dict) -> list[dict]:
        return [m for m in u["payment_methods"].values() if m["source"] == "gift_card"]
    several = sorted(uid for uid, u in users.items() if len(cards(u)) >= 2)
    uid = ctx.pick(several or sorted(uid for uid, u in users.items() if cards(u)), lambda u: u)
    total = sum(m["amount"] for m in cards(users[uid]))
    return _info_task("info_gift_card_balance", uid, "gift_card_balance", str(total),
                      f"Your user id is {uid}. You want to know the total balance of all your "
                      f"gift cards added together. You do not want to change anything.")


@family("info_reservation_total")
def info_reservation_total(ctx: FamilyContext) -> TaskDraft:
    reservation = ctx.pick(ctx.reservations(lambda r, _u: is_active(r)),
                           lambda r: r["reservation_id"])
    total = sum(p["amount"] for p in reservation["payment_history"])
    uid, rid = reservation["user_id"], reservation["reservation_id"]
    return _info_task("info_reservation_total", uid, "reservation_total", str(total),
                      f"Your user id is {uid}. You want to know how much you paid in total for "
                      f"reservation {rid}. You do not want to change anything.", rid)


@family("info_upcoming_count")
def info_upcoming_count(ctx: FamilyContext) -> TaskDraft:
    users, reservations = ctx.world["users"], ctx.world["reservations"]
    pool = sorted(uid for uid, u in users.items() if len(u["reservations"]) >= 2)
    uid = ctx.pick(pool, lambda u: u)
    count = sum(1 for rid in users[uid]["reservations"]
                if is_active(reservations[rid]) and all_future(reservations[rid]))
    return _info_task("info_upcoming_count", uid, "upcoming_count", str(count),
                      f"Your user id is {uid}. You want to know how many of your reservations "
                      f"have not started yet (every flight after today). You do not want to "
                      f"change anything.")


@family("transfer_out_of_scope")
def transfer_out_of_scope(ctx: FamilyContext) -> TaskDraft:
    uid = ctx.pick(sorted(ctx.world["users"]), lambda u: u)
    request = ctx.rng.choice(sorted(OUT_OF_SCOPE))
    summary = transfer_summary(uid, request)
    scenario = Scenario(family="transfer_out_of_scope", intent="transfer", expected="transfer",
                        user_id=uid, request=request)
    instruction = (f"Your user id is {uid}. You want the airline to "
                   f"{OUT_OF_SCOPE[request]}. If the agent offers to transfer you to a human "
                   f"agent, you accept.")
    return TaskDraft(scenario, [Action("transfer_to_human_agents", {"summary": summary})],
                     instruction)

