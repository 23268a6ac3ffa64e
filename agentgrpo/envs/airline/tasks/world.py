"""Seeded generator of small airline worlds in τ-bench's data format.

``generate_world(seed)`` returns ``{"users": ..., "flights": ..., "reservations": ...}``
with the same record layout as τ-bench's JSON files, so the domain's tools run on it
unchanged. Worlds are much smaller than τ-bench's (tool observations end up in a tiny
model's context): a user has at most three reservations and three payment methods, a
direct search returns a handful of flights. Only ``random.Random(seed)`` is used, and
every choice is made over sorted or list-ordered collections, so the same seed gives a
byte-identical ``json.dumps(world, sort_keys=True)``.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from agentgrpo.envs.airline.core.policy import CABINS, NOW, TODAY, booking_price, nonfree_bags

AIRPORTS: tuple[tuple[str, str], ...] = (
    ("SFO", "San Francisco"), ("JFK", "New York"), ("LAX", "Los Angeles"),
    ("ORD", "Chicago"), ("DFW", "Dallas"), ("DEN", "Denver"), ("SEA", "Seattle"),
    ("ATL", "Atlanta"), ("MIA", "Miami"), ("BOS", "Boston"), ("PHX", "Phoenix"),
    ("IAH", "Houston"), ("LAS", "Las Vegas"), ("MCO", "Orlando"), ("EWR", "Newark"),
    ("CLT", "Charlotte"), ("MSP", "Minneapolis"), ("DTW", "Detroit"),
    ("PHL", "Philadelphia"), ("LGA", "LaGuardia"),
)
AIRPORT_CITY = dict(AIRPORTS)
FIRST_NAMES = (
    "Mia", "Noah", "Aarav", "Sofia", "Liam", "Yusuf", "Chen", "Amelia", "Raj", "Fatima",
    "Omar", "Lucas", "Isabella", "Ethan", "Mei", "Juan", "Olivia", "Ivan", "Emma", "Yara",
    "Daiki", "Anya", "Mohamed", "Harper", "Lei", "Ava", "Mason", "Sara", "James", "Nadia",
)
LAST_NAMES = (
    "Li", "Garcia", "Patel", "Smith", "Kim", "Ahmed", "Lopez", "Martin", "Khan", "Silva",
    "Nguyen", "Brown", "Rossi", "Sanchez", "Wilson", "Davis", "Moore", "Taylor", "Ito",
    "Muller", "Novak", "Jackson", "Thomas", "Lee", "Gonzalez", "Anderson", "Clark",
)
PLACES = (  # (city, state, zip prefix)
    ("Austin", "TX", "787"), ("Denver", "CO", "802"), ("Seattle", "WA", "981"),
    ("Boston", "MA", "021"), ("Miami", "FL", "331"), ("Chicago", "IL", "606"),
    ("Phoenix", "AZ", "850"), ("Portland", "OR", "972"), ("Atlanta", "GA", "303"),
)
STREETS = ("Main Street", "Oak Avenue", "Sunset Drive", "Elm Street", "Pine Lane",
           "Lakeview Road", "Hillcrest Drive", "Maple Avenue", "River Road")
CERTIFICATE_AMOUNTS = (100, 150, 250, 500)
RESERVATION_ID_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
# Reservation timing profiles and their weights: which part of the calendar a trip
# touches. Disruptions are over-represented so every task family finds candidates.
PROFILE_WEIGHTS = {"upcoming": 0.47, "disrupted": 0.18, "today": 0.13,
                   "partly_flown": 0.1, "past": 0.12}


@dataclass(frozen=True)
class WorldSpec:
    """Sizes and rates of a generated world (all defaults are deliberately small)."""

    n_airports: int = 8
    n_flights: int = 40
    n_users: int = 150
    n_reservations: int = 340
    days_before: int = 7          # calendar starts this many days before today
    days_after: int = 15          # ... and ends this many days after
    past_cancel_rate: float = 0.08
    future_cancel_rate: float = 0.04
    today_delay_rate: float = 0.4
    within_24h_rate: float = 0.18  # share of non-past reservations booked in the last 24 h
    connection_rate: float = 0.15  # share of trips with a one-stop outbound leg

    def __post_init__(self) -> None:
        if not 3 <= self.n_airports <= len(AIRPORTS):
            raise ValueError(f"n_airports must be in [3, {len(AIRPORTS)}], got {self.n_airports}")
        if self.n_flights < 2 * self.n_airports:
            raise ValueError("n_flights must be at least 2 * n_airports (one flight each way "
                             "along a ring of airports)")
        if self.n_reservations > 3 * self.n_users:
            raise ValueError("n_reservations must be <= 3 * n_users (at most 3 per user)")
        if self.days_before < 2 or self.days_after < 6:
            raise ValueError("need days_before >= 2 and days_after >= 6")


def generate_world(seed: int = 0, **sizes: Any) -> dict[str, dict[str, Any]]:
    """A τ-bench-format world (users, flights, reservations) drawn from ``seed``.

    ``sizes`` are ``WorldSpec`` fields (``n_users``, ``n_flights``, ``n_reservations``,
    ``n_airports``, ``days_before``, ``days_after``, rates).
    """
    spec = WorldSpec(**sizes)
    rng = random.Random(f"airline-world:{seed}")
    calendar = _calendar(spec)
    flights, base_prices = _make_flights(rng, spec, calendar)
    users = _make_users(rng, spec.n_users)
    reservations: dict[str, dict[str, Any]] = {}
    builder = _ReservationBuilder(rng, spec, calendar, flights, base_prices)
    for _ in range(spec.n_reservations):
        open_users = [uid for uid, u in users.items() if len(u["reservations"]) < 3]
        user_id = rng.choice(open_users)
        reservation = builder.build(user_id, users[user_id], reservations)
        reservations[reservation["reservation_id"]] = reservation
        users[user_id]["reservations"].append(reservation["reservation_id"])
    return {"users": users, "flights": flights, "reservations": reservations}


def _calendar(spec: WorldSpec) -> list[str]:
    today = date.fromisoformat(TODAY)
    return [(today + timedelta(days=d)).isoformat()
            for d in range(-spec.days_before, spec.days_after + 1)]


def _clock(minutes: int) -> str:
    """Minutes after midnight of the departure day -> 'HH:MM:SS' (+1 past midnight)."""
    suffix = "+1" if minutes >= 24 * 60 else ""
    minutes %= 24 * 60
    return f"{minutes // 60:02d}:{minutes % 60:02d}:00{suffix}"


def _stamp(day: str, minutes: int) -> str:
    moment = datetime.fromisoformat(day) + timedelta(minutes=minutes)
    return moment.strftime("%Y-%m-%dT%H:%M:%S")


def _routes(rng: random.Random, spec: WorldSpec) -> list[tuple[str, str, int]]:
    """Directed routes (origin, destination, duration in minutes): a ring plus chords."""
    codes = sorted(rng.sample([code for code, _ in AIRPORTS], spec.n_airports))
    rng.shuffle(codes)
    pairs = {tuple(sorted((codes[i], codes[(i + 1) % len(codes)]))) for i in range(len(codes))}
    all_pairs = sorted({tuple(sorted((a, b))) for a in codes for b in codes if a != b})
    extra = [p for p in all_pairs if p not in pairs]
    rng.shuffle(extra)
    target = max(len(pairs), min(len(all_pairs), spec.n_flights // 4))
    pairs |= set(extra[: target - len(pairs)])
    routes = []
    for a, b in sorted(pairs):
        duration = rng.choice(range(60, 361, 30))
        routes += [(a, b, duration), (b, a, duration)]
    return routes


def _make_flights(rng: random.Random, spec: WorldSpec, calendar: list[str]):
    routes = _routes(rng, spec)
    slots = list(routes)  # every directed route gets one flight, extras up to 3 per route
    while len(slots) < spec.n_flights:
        route = rng.choice(routes)
        if slots.count(route) < 3:
            slots.append(route)
        elif all(slots.count(r) >= 3 for r in routes):
            break
    rng.shuffle(slots)
    flights: dict[str, dict[str, Any]] = {}
    base_prices: dict[str, dict[str, int]] = {}
    for index, (origin, destination, duration) in enumerate(slots, start=1):
        number = f"HAT{index:03d}"
        departure = rng.choice(range(5 * 60, 23 * 60, 30))
        base = {"basic_economy": rng.randint(50, 100), "economy": rng.randint(100, 200),
                "business": rng.randint(200, 500)}
        base_prices[number] = base
        flights[number] = {
            "flight_number": number, "origin": origin, "destination": destination,
            "scheduled_departure_time_est": _clock(departure),
            "scheduled_arrival_time_est": _clock(departure + duration),
            "dates": {day: _date_status(rng, spec, day, departure, duration, base)
                      for day in calendar},
        }
    return flights, base_prices


def _date_status(rng: random.Random, spec: WorldSpec, day: str, departure: int,
                 duration: int, base: dict[str, int]) -> dict[str, Any]:
    """One date's record: landed/cancelled (past), by the clock (today), bookable (future)."""
    now_minutes = 15 * 60
    if day < TODAY or (day == TODAY and departure + duration <= now_minutes):
        if day < TODAY and rng.random() < spec.past_cancel_rate:
            return {"status": "cancelled"}
        dep = departure + rng.randint(-30, 30)
        return {"status": "landed", "actual_departure_time_est": _stamp(day, dep),
                "actual_arrival_time_est": _stamp(day, dep + duration + rng.randint(-20, 20))}
    if day == TODAY and departure <= now_minutes:
        dep = departure + rng.randint(-30, 10)
        return {"status": "flying", "actual_departure_time_est": _stamp(day, dep),
                "estimated_arrival_time_est": _stamp(day, dep + duration + rng.randint(-20, 20))}
    if day == TODAY:
        delayed = rng.random() < spec.today_delay_rate
        shift = rng.randint(60, 180) if delayed else rng.randint(-15, 15)
        return {"status": "delayed" if delayed else "on time",
                "estimated_departure_time_est": _stamp(day, departure + shift),
                "estimated_arrival_time_est": _stamp(day, departure + duration + shift)}
    if rng.random() < spec.future_cancel_rate:
        return {"status": "cancelled"}
    seats = {cabin: rng.randint(2, 20) for cabin in CABINS}
    prices = {cabin: max(30, round(base[cabin] * rng.uniform(0.8, 1.25))) for cabin in CABINS}
    return {"status": "available", "available_seats": seats, "prices": prices}


def _person(rng: random.Random) -> dict[str, str]:
    dob = date(1950, 1, 1) + timedelta(days=rng.randint(0, 365 * 55))
    return {"first_name": rng.choice(FIRST_NAMES), "last_name": rng.choice(LAST_NAMES),
            "dob": dob.isoformat()}


def _payment_methods(rng: random.Random, used_ids: set[str]) -> dict[str, dict[str, Any]]:
    """One to three methods, always including a credit card or a gift card."""
    count = rng.choice((1, 2, 2, 3, 3))
    sources = [rng.choice(("credit_card", "gift_card"))]
    sources += [rng.choice(("credit_card", "gift_card", "certificate")) for _ in range(count - 1)]
    methods: dict[str, dict[str, Any]] = {}
    for source in sources:
        while True:
            payment_id = f"{source}_{rng.randint(1000000, 9999999)}"
            if payment_id not in used_ids and not payment_id.startswith("certificate_32213"):
                break
        used_ids.add(payment_id)
        if source == "credit_card":
            methods[payment_id] = {"source": source, "brand": rng.choice(("visa", "mastercard")),
                                   "last_four": f"{rng.randint(0, 9999):04d}", "id": payment_id}
        elif source == "gift_card":
            methods[payment_id] = {"source": source, "amount": rng.randint(20, 400),
                                   "id": payment_id}
        else:
            methods[payment_id] = {"source": source, "amount": rng.choice(CERTIFICATE_AMOUNTS),
                                   "id": payment_id}
    return methods


def _make_users(rng: random.Random, n_users: int) -> dict[str, dict[str, Any]]:
    users: dict[str, dict[str, Any]] = {}
    used_payment_ids: set[str] = set()
    while len(users) < n_users:
        me = _person(rng)
        user_id = f"{me['first_name'].lower()}_{me['last_name'].lower()}_{rng.randint(1000, 9999)}"
        if user_id in users:
            continue
        city, state, zip_prefix = rng.choice(PLACES)
        users[user_id] = {
            "name": {"first_name": me["first_name"], "last_name": me["last_name"]},
            "address": {"address1": f"{rng.randint(10, 999)} {rng.choice(STREETS)}",
                        "address2": f"Suite {rng.randint(100, 999)}", "city": city,
                        "country": "USA", "state": state,
                        "zip": f"{zip_prefix}{rng.randint(10, 99)}"},
            "email": f"{me['first_name'].lower()}.{me['last_name'].lower()}"
                     f"{rng.randint(1000, 9999)}@example.com",
            "dob": me["dob"],
            "payment_methods": _payment_methods(rng, used_payment_ids),
            "saved_passengers": [_person(rng) for _ in range(rng.choice((0, 1, 1, 2)))],
            "membership": rng.choice(("regular", "silver", "gold")),
            "reservations": [],
        }
    return users


class _ReservationBuilder:
    """Draws reservations whose flights, prices and payments are consistent with the world."""

    def __init__(self, rng: random.Random, spec: WorldSpec, calendar: list[str],
                 flights: dict[str, dict[str, Any]], base_prices: dict[str, dict[str, int]]):
        self.rng, self.spec, self.calendar = rng, spec, calendar
        self.flights, self.base_prices = flights, base_prices
        self.by_route: dict[tuple[str, str], list[str]] = {}
        for number, flight in flights.items():
            self.by_route.setdefault((flight["origin"], flight["destination"]), []).append(number)
        self.past = [d for d in calendar if d < TODAY]
        self.future = [d for d in calendar if d > TODAY]

    def build(self, user_id: str, user: dict[str, Any],
              existing: dict[str, Any]) -> dict[str, Any]:
        rng = self.rng
        profile = rng.choices(list(PROFILE_WEIGHTS), weights=list(PROFILE_WEIGHTS.values()))[0]
        first, outbound_day = self._first_leg(profile)
        return_day = self._return_day(profile, outbound_day)
        origin = self.flights[first]["origin"]
        outbound = [(first, outbound_day)] + self._maybe_connection(first, outbound_day, profile)
        destination = self.flights[outbound[-1][0]]["destination"]
        legs = list(outbound)
        if len(outbound) > 1:  # one-stop trips are one way: keeps every record small
            return_day = None
        if return_day is not None:
            legs.append((rng.choice(self.by_route[(destination, origin)]), return_day))
        cabin = rng.choice(CABINS)
        passengers = self._passengers(user)
        segments = [self._segment(number, day, cabin) for number, day in legs]
        insurance = "yes" if rng.random() < 0.4 else "no"
        total_bags = rng.randint(0, 2 * len(passengers))
        nonfree = nonfree_bags(user["membership"], cabin, len(passengers), total_bags)
        price = booking_price([s["price"] for s in segments], len(passengers), insurance, nonfree)
        payers = [pid for pid, m in user["payment_methods"].items()
                  if m["source"] in ("credit_card", "gift_card")]
        return {
            "reservation_id": self._new_id(existing), "user_id": user_id,
            "origin": origin, "destination": destination,
            "flight_type": "round_trip" if return_day else "one_way", "cabin": cabin,
            "flights": segments, "passengers": passengers,
            "payment_history": [{"payment_id": rng.choice(payers), "amount": price}],
            "created_at": self._created_at(profile, outbound_day),
            "total_baggages": total_bags, "nonfree_baggages": nonfree, "insurance": insurance,
        }

    def _first_leg(self, profile: str) -> tuple[str, str]:
        """The first flight and its date, chosen to fit the timing profile."""
        rng, numbers = self.rng, sorted(self.flights)
        if profile == "disrupted":
            cancelled = [(n, d) for n in numbers for d in self.future[:-3]
                         if self.flights[n]["dates"][d]["status"] == "cancelled"]
            if cancelled:
                return rng.choice(cancelled)
        if profile == "today":  # delays are favoured: they drive the compensation tasks
            status = {n: self.flights[n]["dates"][TODAY]["status"] for n in numbers}
            delayed = [n for n in numbers if status[n] == "delayed"]
            live = [n for n in numbers if status[n] in ("delayed", "on time", "flying")]
            if delayed and rng.random() < 0.6:
                return rng.choice(delayed), TODAY
            if live:
                return rng.choice(live), TODAY
        if profile == "past":
            return rng.choice(numbers), rng.choice(self.past[:-1])
        if profile == "partly_flown":
            return rng.choice(numbers), rng.choice(self.past)
        return rng.choice(numbers), rng.choice(self.future[:-3])

    def _return_day(self, profile: str, outbound_day: str) -> str | None:
        rng = self.rng
        if profile == "partly_flown":
            return rng.choice(self.future)
        if rng.random() < 0.5:
            return None
        pool = self.past if outbound_day < TODAY else self.future
        later = [d for d in pool if d > outbound_day][:5]
        return rng.choice(later) if later else None

    def _maybe_connection(self, first: str, day: str, profile: str) -> list[tuple[str, str]]:
        if profile != "upcoming" or self.rng.random() >= self.spec.connection_rate:
            return []
        leg1 = self.flights[first]
        if "+1" in leg1["scheduled_arrival_time_est"]:
            return []
        options = [n for (o, d), nums in sorted(self.by_route.items()) for n in nums
                   if o == leg1["destination"] and d != leg1["origin"]
                   and self.flights[n]["scheduled_departure_time_est"]
                   > leg1["scheduled_arrival_time_est"]]
        return [(self.rng.choice(options), day)] if options else []

    def _segment(self, number: str, day: str, cabin: str) -> dict[str, Any]:
        flight = self.flights[number]
        record = flight["dates"][day]
        if record["status"] == "available":
            price = record["prices"][cabin]
        else:
            price = max(30, round(self.base_prices[number][cabin] * self.rng.uniform(0.8, 1.25)))
        return {"origin": flight["origin"], "destination": flight["destination"],
                "flight_number": number, "date": day, "price": price}

    def _passengers(self, user: dict[str, Any]) -> list[dict[str, str]]:
        rng = self.rng
        count = rng.choices((1, 2, 3), weights=(0.55, 0.3, 0.15))[0]
        me = {**user["name"], "dob": user["dob"]}
        pool = [dict(p) for p in user["saved_passengers"]]
        people = [me] if rng.random() < 0.7 else []
        while len(people) < count:
            people.append(pool.pop(0) if pool else _person(rng))
        return people

    def _created_at(self, profile: str, first_day: str) -> str:
        now = datetime.fromisoformat(NOW)
        if profile in ("upcoming", "disrupted", "today") and \
                self.rng.random() < self.spec.within_24h_rate:
            moment = now - timedelta(seconds=self.rng.randint(60, 24 * 3600 - 60))
        else:
            latest = min(datetime.fromisoformat(first_day), now - timedelta(days=1, hours=1))
            moment = latest - timedelta(seconds=self.rng.randint(3600, 20 * 24 * 3600))
        return moment.strftime("%Y-%m-%dT%H:%M:%S")

    def _new_id(self, existing: dict[str, Any]) -> str:
        while True:
            rid = "".join(self.rng.choice(RESERVATION_ID_CHARS) for _ in range(6))
            has_digit = any(c.isdigit() for c in rid)
            has_letter = any(c.isalpha() for c in rid)
            if has_digit and has_letter and not rid.startswith("HAT") and rid not in existing:
                return rid


def world_airports(world: dict[str, Any]) -> dict[str, str]:
    """IATA code -> city for the airports a world's flights serve (for list_all_airports)."""
    codes = {f["origin"] for f in world["flights"].values()}
    codes |= {f["destination"] for f in world["flights"].values()}
    return {code: AIRPORT_CITY[code] for code in sorted(codes)}
