"""What the scripted airline user says: openings, slot answers and restatements.

Pure functions of the scenario (plus a ``random.Random`` that picks among a few
phrasings), used by ``agentgrpo.envs.user_sim.ScriptedUser``. The user only says
what its scenario lets it know; a question it cannot answer gets "I don't know".
"""
from __future__ import annotations

import random
from collections.abc import Callable

from agentgrpo.envs.airline.simulation.dialogue import extract_entities, spoken_date
from agentgrpo.envs.airline.simulation.scenario import Scenario

OPENINGS = {
    "cancel": ("Hi, I'd like to cancel a reservation.", "Hello, I need to cancel one of my "
               "bookings.", "Hi there. I want to cancel a trip I booked."),
    "change_flight": ("Hi, I need to change a flight on one of my reservations.",
                      "Hello, I'd like to move a flight in my reservation to another date."),
    "change_cabin": ("Hi, I'd like to change the cabin class of one of my reservations.",
                     "Hello, I want to switch my reservation to a different cabin."),
    "add_bags": ("Hi, I want to add checked bags to a reservation.",
                 "Hello, I need to add some luggage to my booking."),
    "update_passengers": ("Hi, there is a mistake in a passenger's details on my reservation.",
                          "Hello, I need to correct a passenger on one of my bookings."),
    "add_insurance": ("Hi, I'd like to add travel insurance to one of my reservations.",
                      "Hello, can I still buy travel insurance for a trip I booked?"),
    "add_passenger": ("Hi, I'd like to add another passenger to my reservation.",
                      "Hello, a friend wants to join my trip. Can you add them to my booking?"),
    "book": ("Hi, I'd like to book a flight.", "Hello, I want to make a new reservation."),
    "compensation": ("Hi, the airline cancelled my flight and I want compensation for it.",
                     "Hello. My flight was cancelled by the airline. I expect some "
                     "compensation."),
}
DELAY_OPENINGS = ("Hi, my flight today is delayed. I want to cancel my reservation, and I "
                  "would like compensation for the delay.",
                  "Hello, my flight today is badly delayed, so I want to cancel my booking. "
                  "I also expect compensation.")
QUESTIONS = {
    "gift_card_balance": "What is the total balance of all my gift cards?",
    "reservation_total": "How much did I pay in total for one of my reservations?",
    "upcoming_count": "How many of my reservations have not started yet?",
}
REQUESTS = {
    "lost_item": "I left my laptop on board a recent flight and need help finding it.",
    "wheelchair": "I need wheelchair assistance at the airport for my next trip.",
    "meal": "I'd like to order a special vegetarian meal for my next flight.",
}
REASONS = {
    "change_of_plan": ("My plans have changed.", "Change of plans, I can't make the trip."),
    "airline_cancelled": ("The airline cancelled my flight {flight} on {day}.",),
    "health": ("I'm ill and my doctor told me not to travel.",),
    "weather": ("There is a severe storm coming, so I can't travel because of the weather.",),
    "delay": ("My flight {flight} today is delayed.",),
}
CABIN_WORDS = {"basic_economy": "basic economy", "economy": "economy", "business": "business"}
STOP = "###STOP###"


def opening(scenario: Scenario, rng: random.Random) -> str:
    if scenario.intent == "info":
        return "Hi. " + QUESTIONS[scenario.question or "gift_card_balance"]
    if scenario.intent == "transfer":
        return "Hi. " + REQUESTS[scenario.request or "lost_item"]
    if scenario.reason == "delay":
        return rng.choice(DELAY_OPENINGS)
    return rng.choice(OPENINGS[scenario.intent])


def restatement(scenario: Scenario) -> str:
    """One sentence saying what the user wants (used when the agent drifts)."""
    s, rid = scenario, scenario.reservation_id
    if s.intent == "cancel":
        return f"I want to cancel reservation {rid}."
    if s.intent == "change_flight":
        when = spoken_date(s.new_date) if s.new_date else "another date"
        return f"I want to move my {_leg(s)} on reservation {rid} to {when}."
    if s.intent == "change_cabin":
        return f"I want reservation {rid} to be in {CABIN_WORDS[s.cabin or 'economy']}."
    if s.intent == "add_bags":
        return f"I want to add {s.bags} checked bags to reservation {rid}."
    if s.intent == "update_passengers":
        return f"I want to correct a passenger's details on reservation {rid}."
    if s.intent == "add_insurance":
        return f"I want to add travel insurance to reservation {rid}."
    if s.intent == "add_passenger":
        return f"I want to add a passenger to reservation {rid}."
    if s.intent == "book":
        trip = s.trip or {}
        return (f"I want to book a flight from {trip.get('origin')} to "
                f"{trip.get('destination')}.")
    if s.intent == "compensation":
        return "I want compensation for my cancelled flight."
    if s.intent == "info":
        return QUESTIONS[s.question or "gift_card_balance"]
    return REQUESTS[s.request or "lost_item"]


def _leg(s: Scenario) -> str:
    return "flight" if s.change_leg in (None, "only") else f"{s.change_leg} flight"


def _person(p: dict[str, str]) -> str:
    return f"{p['first_name']} {p['last_name']}, born {p['dob']}"


def _trip(s: Scenario, rng: random.Random) -> str:
    trip = s.trip or {}
    dates = trip.get("dates", [])
    say = spoken_date if rng.random() < 0.5 else str
    kind = "round trip" if trip.get("flight_type") == "round_trip" else "one-way trip"
    back = f" and coming back on {say(dates[1])}" if len(dates) > 1 else ""
    return (f"I want a {kind} from {trip.get('origin')} to {trip.get('destination')}, "
            f"leaving on {say(dates[0])}{back}, in {CABIN_WORDS[trip.get('cabin', 'economy')]}.")


def _payment(s: Scenario, state: dict) -> str:
    if s.rejected_payment_ids and not state.get("rejected_offered"):
        state["rejected_offered"] = True
        first, second = s.rejected_payment_ids[:2]
        return f"I'd like to pay with both {first} and {second}."
    ids = s.payment_ids
    if not ids:
        return "I don't want to pay anything for this."
    if len(ids) == 1:
        return f"Please use {ids[0]}."
    return f"Please use {', then '.join(ids[:-1])}, and put the rest on {ids[-1]}."


def _flight_pick(s: Scenario, agent_text: str) -> str:
    """Pick the wanted flight among those listed ("" when no flight is listed)."""
    offered = extract_entities(agent_text)["flight_number"]
    if not offered:
        return ""
    for number in s.flight_choices:
        if number in offered:
            return f"I'll take {number}."
    return "None of those is the flight I want."


def _reason(s: Scenario, rng: random.Random) -> str:
    flight = s.disrupted_flight or {}
    words = {"flight": flight.get("flight_number", ""),
             "day": spoken_date(flight["date"]) if flight.get("date") else ""}
    return rng.choice(REASONS.get(s.reason or "", ("I'd rather not say.",))).format(**words)


def _update(s: Scenario) -> str:
    u = s.passenger_update or {}
    if not u:
        return "Nothing needs to be corrected."
    old, new, field = u["old"], u["new"], u["field"]
    label = {"first_name": "first name", "last_name": "last name", "dob": "date of birth"}[field]
    return (f"The passenger {old['first_name']} {old['last_name']} has the wrong {label}: "
            f"it should be {new[field]}.")


def _passengers(s: Scenario) -> str:
    if s.intent == "add_passenger" and s.passengers:
        return f"I want to add {_person(s.passengers[0])}."
    if s.intent != "book":
        return "The passengers are the ones already on the reservation."
    if len(s.passengers) == 1:
        return f"Just me: {_person(s.passengers[0])}."
    return f"{len(s.passengers)} passengers: " + "; ".join(_person(p) for p in s.passengers) + "."


def _bags(s: Scenario) -> str:
    if s.intent == "add_bags":
        return f"I'd like to add {s.bags} checked bag{'s' * ((s.bags or 0) != 1)}."
    if s.intent == "book":
        return f"{s.bags} checked bag{'s' * ((s.bags or 0) != 1)}."
    return "I don't want to change the bags."


def _insurance(s: Scenario) -> str:
    if s.intent == "add_insurance":
        return "Yes, I want to add travel insurance."
    if s.intent == "book":
        return "Yes, I want travel insurance." if s.insurance == "yes" else "No insurance, thanks."
    return "I don't need anything about insurance."


def _cabin(s: Scenario) -> str:
    if s.intent == "change_cabin":
        return f"I'd like {CABIN_WORDS[s.cabin or 'economy']}."
    if s.intent == "book":
        return f"{CABIN_WORDS[(s.trip or {}).get('cabin', 'economy')].capitalize()}, please."
    return "I don't want to change the cabin."


def _user_id(s: Scenario, rng: random.Random) -> str:
    return rng.choice(("My user id is {}.", "Sure, it's {}.", "It's {}.")).format(s.user_id)


def _reservation(s: Scenario, rng: random.Random) -> str:
    if s.reservation_id:
        return rng.choice(("The reservation id is {}.", "It's {}.")).format(s.reservation_id)
    if s.intent == "book":
        return "I don't have a reservation yet; I want to book a new one."
    return "It's about all of my reservations." if s.intent == "info" else "I don't know it."


def _change(s: Scenario) -> str:
    if s.intent != "change_flight" or not s.new_date:
        return restatement(s)
    return f"I'd like to move my {_leg(s)} to {spoken_date(s.new_date)}."


SlotAnswer = Callable[[Scenario, random.Random, str, dict], str]
SLOT_ANSWERS: dict[str, SlotAnswer] = {
    "user_id": lambda s, rng, text, state: _user_id(s, rng),
    "reservation_id": lambda s, rng, text, state: _reservation(s, rng),
    "reason": lambda s, rng, text, state: _reason(s, rng),
    "trip": lambda s, rng, text, state: _trip(s, rng) if s.intent == "book" else restatement(s),
    "cabin": lambda s, rng, text, state: _cabin(s),
    "flight": lambda s, rng, text, state: _flight_pick(s, text),
    "change": lambda s, rng, text, state: _change(s),
    "update": lambda s, rng, text, state: _update(s),
    "passengers": lambda s, rng, text, state: _passengers(s),
    "bags": lambda s, rng, text, state: _bags(s),
    "insurance": lambda s, rng, text, state: _insurance(s),
    "payment": lambda s, rng, text, state: _payment(s, state),
    "help": lambda s, rng, text, state: restatement(s),
}


def answer_slots(scenario: Scenario, slots: list[str], agent_text: str, rng: random.Random,
                 state: dict) -> str:
    """One reply answering every asked slot once, in slot order (no duplicates)."""
    if "trip" in slots and scenario.intent == "book":
        slots = [s for s in slots if s != "cabin"]  # the trip answer names the cabin
    replies: list[str] = []
    for slot in slots:
        answer = SLOT_ANSWERS.get(slot)
        if answer is None:
            continue
        text = answer(scenario, rng, agent_text, state)
        if text and text not in replies:
            replies.append(text)
    return " ".join(replies)
