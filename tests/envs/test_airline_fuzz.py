"""Randomised checks of the airline database on real τ-bench records.

1. Fast grading equals the naive method: 1,000+ random edit sequences (bookings,
   cancellations, flight/cabin changes, bags, passengers, certificates, reads and
   refused calls) run on both the overlay state and the full-copy ``DictState``;
   the materialized data must be identical (types and key order included), the
   incremental hash must equal the from-scratch multiset hash, and the fast and
   naive hashes must split the final states into the same equality classes.
2. Fuzz: 1,000+ random or malformed calls never raise, and an error never changes
   the state (hash and materialized data unchanged).

Both run on a small world cut from the real data (a dozen users with all their
reservations, a dozen flights) so that full copies and full hashes stay cheap.
"""
from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest

from agentgrpo.envs.airline import AirlineDomain, DictState, load_tau_bench, multiset_hash
from agentgrpo.envs.airline.core.db import copy_json

CABINS = ["basic_economy", "economy", "business"]
DATES = [f"2024-05-{day:02d}" for day in range(16, 31)] + ["2024-05-10", "2024-06-01"]
NAMES = ["Ava", "Noah", "Mia", "Liam", "Zoe"]
EXPRESSIONS = ["2 * (350 - 122)", "1/3", "7 - 2.5", "10 / 4", "-(2+3)*4", "1/0", "2**3", "(1", "01", "", "1.5.5", "abc"]


def small_world(data: dict[str, Any], seed: int = 0, users: int = 10, flights: int = 8) -> dict:
    """A consistent slice of the real data: some users, their reservations, some flights."""
    rng = random.Random(seed)
    user_ids = rng.sample(sorted(data["users"]), users)
    reservation_ids = [r for u in user_ids for r in data["users"][u]["reservations"] if r in data["reservations"]]
    flight_ids = rng.sample(sorted(data["flights"]), flights)
    return copy_json({
        "users": {u: data["users"][u] for u in user_ids},
        "flights": {f: data["flights"][f] for f in flight_ids},
        "reservations": {r: data["reservations"][r] for r in reservation_ids},
    })


class CallMaker:
    """Random plausible tool calls (many still refused by the tools) and malformed ones."""

    def __init__(self, rng: random.Random, world: dict[str, Any], deep_garbage: bool = False) -> None:
        self.rng = rng
        self.deep_garbage = deep_garbage
        self.world = world
        self.users = sorted(world["users"])
        self.flights = sorted(world["flights"])
        self.airports = sorted({f["origin"] for f in world["flights"].values()})

    # ---- helpers --------------------------------------------------------------------
    def _flight_ref(self) -> dict[str, str]:
        return {"flight_number": self.rng.choice(self.flights), "date": self.rng.choice(DATES)}

    def _reservation(self, store) -> tuple[str, str]:
        uid = self.rng.choice(self.users)
        rids = store.get("users", uid)["reservations"] or ["NOPE00"]
        rid = self.rng.choice(rids)
        return uid, (rid if self.rng.random() > 0.05 else "ZZZZZZ")

    def _payment_id(self, store, uid: str) -> str:
        return self.rng.choice(list(store.get("users", uid)["payment_methods"]) or ["credit_card_0"])

    def _price(self, store, refs, cabin: str, travellers: int) -> int | None:
        total = 0
        for ref in refs:
            day = store.get("flights", ref["flight_number"])["dates"].get(ref["date"], {})
            if day.get("status") != "available":
                return None
            total += day["prices"][cabin] * travellers
        return total

    def _pay(self, user: dict[str, Any], price: int) -> list[dict[str, Any]]:
        methods = list(user["payment_methods"].values()) or [{"id": "credit_card_0", "source": "credit_card"}]
        first = self.rng.choice(methods)
        amount = min(first.get("amount", price), price) if "amount" in first else price
        payments = [{"payment_id": first["id"], "amount": amount}]
        cards = [m["id"] for m in methods if m["source"] == "credit_card" and m["id"] != first["id"]]
        if price - amount and cards:
            payments.append({"payment_id": self.rng.choice(cards), "amount": price - amount})
        return payments

    # ---- write calls ----------------------------------------------------------------
    def book(self, store) -> tuple[str, dict]:
        rng = self.rng
        uid = rng.choice(self.users)
        user = store.get("users", uid)
        me = {**user["name"], "dob": user["dob"]}
        pool = [me] + list(user["saved_passengers"])
        passengers = copy_json(rng.sample(pool, rng.randint(1, min(3, len(pool)))))
        refs = [self._flight_ref() for _ in range(rng.choice([1, 1, 2]))]
        cabin, insurance, nonfree = rng.choice(CABINS), rng.choice(["yes", "no"]), rng.choice([0, 0, 1, 2])
        price = self._price(store, refs, cabin, len(passengers)) or rng.randint(100, 900)
        price += (30 * len(passengers) if insurance == "yes" else 0) + 50 * nonfree
        payments = self._pay(user, price)
        if rng.random() < 0.1:
            payments[0]["amount"] += 1
        if rng.random() < 0.1:  # float amounts: accepted, but stored as floats
            payments = [{**p, "amount": float(p["amount"])} for p in payments]
        return "book_reservation", {
            "user_id": uid, "origin": "JFK", "destination": "SEA",
            "flight_type": rng.choice(["one_way", "round_trip"]), "cabin": cabin, "flights": refs,
            "passengers": passengers, "payment_methods": payments,
            "total_baggages": nonfree + rng.choice([0, 1]), "nonfree_baggages": nonfree,
            "insurance": insurance,
        }

    def change_flights(self, store) -> tuple[str, dict]:
        uid, rid = self._reservation(store)
        res = store.get("reservations", rid) or {"cabin": "economy", "flights": []}
        cabin = res["cabin"] if self.rng.random() < 0.6 else self.rng.choice(CABINS)
        refs = [
            {"flight_number": f["flight_number"], "date": f["date"]} if self.rng.random() < 0.6 else self._flight_ref()
            for f in res["flights"]
        ]
        pid = self._payment_id(store, uid)
        return "update_reservation_flights", {"reservation_id": rid, "cabin": cabin, "flights": refs, "payment_id": pid}

    def bags(self, store) -> tuple[str, dict]:
        uid, rid = self._reservation(store)
        res = store.get("reservations", rid) or {"total_baggages": 0, "nonfree_baggages": 0}
        pid = self._payment_id(store, uid)
        return "update_reservation_baggages", {
            "reservation_id": rid, "payment_id": pid,
            "total_baggages": res["total_baggages"] + self.rng.randint(0, 2),
            "nonfree_baggages": max(0, res["nonfree_baggages"] + self.rng.randint(-1, 2)),
        }

    def passengers(self, store) -> tuple[str, dict]:
        _, rid = self._reservation(store)
        res = store.get("reservations", rid) or {"passengers": []}
        original = self.world["reservations"].get(rid, res)["passengers"]
        roll = self.rng.random()
        if roll < 0.4:  # back to the original details: a round trip to the base record
            passengers = copy_json(original)
        else:
            passengers = copy_json(res["passengers"])
            if roll > 0.85 or not passengers:
                passengers.append({"first_name": "Extra", "last_name": "Person", "dob": "2000-01-01"})
            else:
                self.rng.choice(passengers)["first_name"] = self.rng.choice(NAMES)
        return "update_reservation_passengers", {"reservation_id": rid, "passengers": passengers}

    def write(self, store) -> tuple[str, dict]:
        rng = self.rng
        kind = rng.choices(["book", "cancel", "flights", "bags", "pax", "cert"], [3, 2, 3, 2, 2, 1])[0]
        if kind == "book":
            return self.book(store)
        if kind == "cancel":
            return "cancel_reservation", {"reservation_id": self._reservation(store)[1]}
        if kind == "flights":
            return self.change_flights(store)
        if kind == "bags":
            return self.bags(store)
        if kind == "pax":
            return self.passengers(store)
        amount = rng.choice([50, 100, 150.0, 99.5])
        return "send_certificate", {"user_id": rng.choice(self.users + ["nobody_0"]), "amount": amount}

    # ---- other calls ----------------------------------------------------------------
    def read(self, store) -> tuple[str, dict]:
        rng = self.rng
        kind = rng.randrange(8)
        if kind == 0:
            return "get_user_details", {"user_id": rng.choice(self.users + ["nobody_0"])}
        if kind == 1:
            return "get_reservation_details", {"reservation_id": self._reservation(store)[1]}
        if kind in (2, 3):
            flight = self.world["flights"][rng.choice(self.flights)]
            dest = flight["destination"] if kind == 2 else rng.choice(self.airports)
            name = "search_direct_flight" if kind == 2 else "search_onestop_flight"
            return name, {"origin": flight["origin"], "destination": dest, "date": rng.choice(DATES)}
        if kind == 4:
            return "list_all_airports", {}
        if kind == 5:
            return "calculate", {"expression": rng.choice(EXPRESSIONS)}
        if kind == 6:
            return "think", {"thought": "checking the policy"}
        return "transfer_to_human_agents", {"summary": "user asks for a human"}

    def plausible(self, store) -> tuple[str, dict]:
        return self.write(store) if self.rng.random() < 0.7 else self.read(store)

    def malformed(self, store) -> tuple[Any, Any]:
        """A call broken at the boundary: name, argument set, types or values."""
        rng = self.rng
        name, kwargs = self.plausible(store)
        roll = rng.randrange(7)
        if roll == 0:
            return rng.choice(["", "book", "DROP TABLE", None, 7, ["think"]]), kwargs
        if roll == 1:
            return name, rng.choice([None, [], "user_id=x", 5, 1.5, {1: 2}])
        if roll == 2 and kwargs:
            kwargs.pop(rng.choice(sorted(kwargs)))
            return name, kwargs
        if roll == 3:
            return name, {**kwargs, rng.choice(["extra", "user", "flights2"]): 1}
        return name, self._corrupt(kwargs)

    def _corrupt(self, value: Any) -> Any:
        """Replace one random leaf (or subtree) of the arguments by garbage."""
        garbage = [None, True, 1.5, "x", [], {}, math.nan, math.inf, 10**40, -(10**40), 2**53 + 1,
                   "9" * 5000, [[[[[]]]]], {"flight_number": 1}, [{"first_name": "A"}]]
        if self.deep_garbage:  # deeper than Python's recursion limit
            deep: Any = 0
            for _ in range(5000):
                deep = [deep]
            garbage.append(deep)
        if not isinstance(value, (dict, list)) or not value or self.rng.random() < 0.3:
            return self.rng.choice(garbage)
        value = copy_json(value)
        key = self.rng.choice(sorted(value) if isinstance(value, dict) else range(len(value)))
        value[key] = self._corrupt(value[key])
        return value


@pytest.fixture(scope="module")
def world(tau_bench_dir) -> dict:
    return small_world(load_tau_bench(tau_bench_dir).data)


def exact_text(data: dict) -> str:
    """JSON text with key order and types kept: equal texts mean exactly equal data."""
    return json.dumps(data)


def is_write(domain: AirlineDomain, name: Any) -> bool:
    return isinstance(name, str) and name in domain.write_tools


def run_sequence(domain: AirlineDomain, world: dict, calls: list) -> tuple:
    fast, naive = domain.new_state(), DictState(world)
    for name, kwargs in calls:
        observation = domain.execute(fast, name, copy_json(kwargs))
        assert observation == domain.execute(naive, name, copy_json(kwargs)), (name, kwargs)
    materialized = fast.materialize()
    assert exact_text(materialized) == exact_text(naive.materialize())
    assert fast.db_hash() == multiset_hash(materialized)
    return fast.db_hash(), naive.db_hash()


@pytest.mark.parametrize("compat,sequences", [("tau_bench", 1000), ("fixed", 200)])
def test_fast_grading_equals_naive_on_random_edit_sequences(world, compat, sequences):
    domain = AirlineDomain(world, [], "", compat)
    hashes: list[tuple[str, str]] = []
    previous: list = []
    writes_ok = 0
    for seq in range(sequences):
        rng = random.Random(seq)
        maker = CallMaker(rng, world)
        if seq % 10 == 9:  # the previous sequence in reverse: equal states when the edits commute
            calls = list(reversed(previous))
        else:
            probe = domain.new_state()  # generate calls against the evolving state
            calls = []
            for _ in range(rng.randint(0, 8)):
                call = maker.plausible(probe) if rng.random() < 0.85 else maker.malformed(probe)
                calls.append(call)
                observation = domain.execute(probe, *call)
                writes_ok += is_write(domain, call[0]) and not observation.startswith("Error: ")
        hashes.append(run_sequence(domain, world, calls))
        previous = calls

    fast_hashes, naive_hashes = zip(*hashes)
    pairs = set(hashes)
    # Same equality classes: each fast hash maps to one naive hash and vice versa.
    assert len(pairs) == len(set(fast_hashes)) == len(set(naive_hashes))
    base = domain.new_state().db_hash()
    assert fast_hashes.count(base) >= sequences // 20, "too few sequences ending at the base state"
    assert len(pairs) < sequences - sequences // 20, "too few equal final states to test equality"
    assert len(pairs) > sequences // 3 and writes_ok > sequences, "too few successful edits"


def test_fuzz_never_raises_and_errors_change_nothing(world):
    domain = AirlineDomain(world, [], "", "tau_bench")
    rng = random.Random(1234)
    maker = CallMaker(rng, world, deep_garbage=True)
    fast, naive = domain.new_state(), DictState(world)
    snapshot = (fast.db_hash(), exact_text(fast.materialize()), naive.db_hash())
    errors = 0
    for _ in range(1200):
        name, kwargs = maker.malformed(fast) if rng.random() < 0.6 else maker.plausible(fast)
        observation = domain.execute(fast, name, kwargs)
        assert isinstance(observation, str)
        assert observation == domain.execute(naive, name, kwargs)
        now = (fast.db_hash(), exact_text(fast.materialize()), naive.db_hash())
        if observation.startswith("Error: ") or not is_write(domain, name):
            errors += observation.startswith("Error: ")
            assert now == snapshot, (name, observation)
        snapshot = now
    assert errors > 600
    assert domain.base.verify(), "the base data was modified in place"
