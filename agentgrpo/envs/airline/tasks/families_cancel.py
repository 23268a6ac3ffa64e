"""Task families about cancelling and compensation.

Each cancel family isolates one clause of the cancellation rule (booked within 24 h,
airline-cancelled flight, business cabin, insurance with a covered reason), plus a
refusal, a flown-trip transfer, and the three compensation cases (cancelled flight,
delayed flight with a cancellation, and a user who is not eligible).
"""
from __future__ import annotations

from agentgrpo.envs.airline.core.policy import (
    TODAY,
    booked_within_24h,
    cancellation_rule,
    compensation_amount,
    compensation_eligible,
    has_flown_segment,
)
from agentgrpo.envs.airline.simulation.dialogue import spoken_date
from agentgrpo.envs.airline.simulation.scenario import Scenario
from agentgrpo.envs.airline.tasks.common import (
    FamilyContext,
    TaskDraft,
    all_future,
    cancel_confirmation,
    certificate_confirmation,
    family,
    is_active,
    trip_words,
)
from agentgrpo.envs.types import Action

REASON_SENTENCES = {
    "change_of_plan": "The reason is that your plans have changed.",
    "airline_cancelled": "The reason is that the airline cancelled your flight {flight} on {day}.",
    "health": "The reason is that you are ill and your doctor told you not to travel.",
    "weather": "The reason is a severe storm forecast that makes you afraid to travel.",
    "delay": "The reason is that your flight {flight} today is delayed.",
}
ACCEPT_ANSWER = "If the agent says it cannot be done, you accept that and end the conversation."


def _segments_with(ctx: FamilyContext, reservation: dict, status: str) -> list[dict]:
    return [s for s in reservation["flights"]
            if ctx.status(s["flight_number"], s["date"]) == status]


def _disruption(ctx: FamilyContext, reservation: dict, status: str) -> dict[str, str] | None:
    hits = _segments_with(ctx, reservation, status)
    if not hits:
        return None
    return {"flight_number": hits[0]["flight_number"], "date": hits[0]["date"], "status": status}


def _cancel_task(ctx: FamilyContext, reservation: dict, reason: str, name: str) -> TaskDraft:
    """A cancellation request; gold and expected outcome follow from the policy."""
    rid, uid = reservation["reservation_id"], reservation["user_id"]
    disrupted = _disruption(ctx, reservation, "cancelled" if reason == "airline_cancelled"
                            else "delayed")
    if has_flown_segment(reservation):
        expected, actions = "transfer", [Action("transfer_to_human_agents", {
            "summary": f"User {uid} wants to cancel reservation {rid}, but part of the trip "
                       f"has already been flown."})]
    elif cancellation_rule(reservation, reason):
        expected, actions = "write", [Action("cancel_reservation", {"reservation_id": rid})]
    else:
        expected, actions = "refusal", []
    scenario = Scenario(family=name, intent="cancel", expected=expected, user_id=uid,
                        reservation_id=rid, reason=reason, disrupted_flight=disrupted,
                        confirmations=[cancel_confirmation(reservation)])
    words = {"flight": disrupted["flight_number"] if disrupted else "",
             "day": spoken_date(disrupted["date"]) if disrupted else ""}
    instruction = (f"Your user id is {uid}. You want to cancel reservation {rid}, "
                   f"{trip_words(reservation)}. {REASON_SENTENCES[reason].format(**words)} "
                   f"{ACCEPT_ANSWER}")
    return TaskDraft(scenario, actions, instruction)


def _cancellable_pool(ctx: FamilyContext, *, within_24h: bool, cabin_business: bool,
                      insurance: str | None, cancelled_segment: bool) -> list[dict]:
    """Untouched future trips matching the given facts (None = any insurance)."""
    def fits(r: dict, _user: dict) -> bool:
        return (is_active(r) and all_future(r)
                and booked_within_24h(r["created_at"]) == within_24h
                and (r["cabin"] == "business") == cabin_business
                and (insurance is None or r["insurance"] == insurance)
                and bool(_segments_with(ctx, r, "cancelled")) == cancelled_segment)
    return ctx.reservations(fits)


def _rid(reservation: dict) -> str:
    return reservation["reservation_id"]


@family("cancel_within_24h")
def cancel_within_24h(ctx: FamilyContext) -> TaskDraft:
    pool = _cancellable_pool(ctx, within_24h=True, cabin_business=False, insurance=None,
                             cancelled_segment=False)
    return _cancel_task(ctx, ctx.pick(pool, _rid), "change_of_plan", "cancel_within_24h")


@family("cancel_airline_cancelled")
def cancel_airline_cancelled(ctx: FamilyContext) -> TaskDraft:
    pool = _cancellable_pool(ctx, within_24h=False, cabin_business=False, insurance="no",
                             cancelled_segment=True)
    return _cancel_task(ctx, ctx.pick(pool, _rid), "airline_cancelled",
                        "cancel_airline_cancelled")


@family("cancel_business")
def cancel_business(ctx: FamilyContext) -> TaskDraft:
    pool = _cancellable_pool(ctx, within_24h=False, cabin_business=True, insurance=None,
                             cancelled_segment=False)
    return _cancel_task(ctx, ctx.pick(pool, _rid), "change_of_plan", "cancel_business")


@family("cancel_insured")
def cancel_insured(ctx: FamilyContext) -> TaskDraft:
    pool = _cancellable_pool(ctx, within_24h=False, cabin_business=False, insurance="yes",
                             cancelled_segment=False)
    reason = ctx.rng.choice(("health", "weather"))
    return _cancel_task(ctx, ctx.pick(pool, _rid), reason, "cancel_insured")


@family("cancel_refused")
def cancel_refused(ctx: FamilyContext) -> TaskDraft:
    pool = _cancellable_pool(ctx, within_24h=False, cabin_business=False, insurance=None,
                             cancelled_segment=False)
    reservation = ctx.pick(pool, _rid)
    # insured trips are refused only for an uncovered reason
    reasons = ("change_of_plan",) if reservation["insurance"] == "yes" else \
        ("change_of_plan", "health", "weather")
    return _cancel_task(ctx, reservation, ctx.rng.choice(reasons), "cancel_refused")


@family("transfer_flown_cancel")
def transfer_flown_cancel(ctx: FamilyContext) -> TaskDraft:
    pool = ctx.reservations(lambda r, _u: is_active(r) and has_flown_segment(r)
                            and any(s["date"] > TODAY for s in r["flights"]))
    return _cancel_task(ctx, ctx.pick(pool, _rid), "change_of_plan", "transfer_flown_cancel")


def _compensation_task(ctx: FamilyContext, reservation: dict, name: str) -> TaskDraft:
    """A complaint about an airline-cancelled flight with a request for compensation."""
    uid, rid = reservation["user_id"], reservation["reservation_id"]
    disrupted = _disruption(ctx, reservation, "cancelled")
    amount = compensation_amount("cancelled", len(reservation["passengers"]))
    eligible = compensation_eligible(ctx.user(uid)["membership"], reservation)
    actions = [Action("send_certificate", {"user_id": uid, "amount": amount})] if eligible else []
    scenario = Scenario(
        family=name, intent="compensation", expected="write" if eligible else "refusal",
        user_id=uid, reservation_id=rid, reason="airline_cancelled", disrupted_flight=disrupted,
        confirmations=[certificate_confirmation(amount, 100, rid)])
    instruction = (
        f"Your user id is {uid}. The airline cancelled your flight {disrupted['flight_number']} "
        f"on {spoken_date(disrupted['date'])} (reservation {rid}). You are upset and want "
        f"compensation for it, but you do not want to cancel or change the reservation. "
        f"{ACCEPT_ANSWER}")
    return TaskDraft(scenario, actions, instruction)


def _has_cancelled_flight(ctx: FamilyContext, reservation: dict) -> bool:
    return is_active(reservation) and bool(_segments_with(ctx, reservation, "cancelled"))


@family("compensation_cancelled")
def compensation_cancelled(ctx: FamilyContext) -> TaskDraft:
    pool = ctx.reservations(lambda r, u: _has_cancelled_flight(ctx, r)
                            and compensation_eligible(u["membership"], r))
    return _compensation_task(ctx, ctx.pick(pool, _rid), "compensation_cancelled")


@family("compensation_refused")
def compensation_refused(ctx: FamilyContext) -> TaskDraft:
    pool = ctx.reservations(lambda r, u: _has_cancelled_flight(ctx, r)
                            and not compensation_eligible(u["membership"], r))
    return _compensation_task(ctx, ctx.pick(pool, _rid), "compensation_refused")


@family("compensation_delayed")
def compensation_delayed(ctx: FamilyContext) -> TaskDraft:
    """A delayed flight today: cancel the trip (allowed), then a $50-per-passenger credit."""
    def fits(r: dict, user: dict) -> bool:
        return (is_active(r) and not has_flown_segment(r)
                and bool(_segments_with(ctx, r, "delayed"))
                and cancellation_rule(r, "delay") is not None
                and compensation_eligible(user["membership"], r))
    reservation = ctx.pick(ctx.reservations(fits), _rid)
    uid, rid = reservation["user_id"], reservation["reservation_id"]
    disrupted = _disruption(ctx, reservation, "delayed")
    amount = compensation_amount("delayed", len(reservation["passengers"]))
    actions = [Action("cancel_reservation", {"reservation_id": rid}),
               Action("send_certificate", {"user_id": uid, "amount": amount})]
    scenario = Scenario(
        family="compensation_delayed", intent="cancel", expected="write", user_id=uid,
        reservation_id=rid, reason="delay", disrupted_flight=disrupted,
        confirmations=[cancel_confirmation(reservation),
                       certificate_confirmation(amount, 50, rid)])
    instruction = (
        f"Your user id is {uid}. Your flight {disrupted['flight_number']} today is delayed, so "
        f"you want to cancel reservation {rid}. You are annoyed and, once it is cancelled, "
        f"you want compensation for the delay. {ACCEPT_ANSWER}")
    return TaskDraft(scenario, actions, instruction)

