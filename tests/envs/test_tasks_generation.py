"""Task families, generate_domain and split_tasks."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from agentgrpo.envs.airline.core.policy import TODAY, cancellation_rule, split_payment
from agentgrpo.envs.airline.simulation.scenario import Scenario
from agentgrpo.envs.airline.tasks.common import FAMILIES
from agentgrpo.envs.airline.tasks.generate import (
    FAMILY_NAMES,
    family_schedule,
    generate_domain,
    split_tasks,
)
from agentgrpo.envs.types import Task

WRITE_TOOLS = {"book_reservation", "cancel_reservation", "update_reservation_flights",
               "update_reservation_baggages", "update_reservation_passengers",
               "send_certificate"}


@pytest.fixture(scope="module")
def domain():
    return generate_domain(0, n_tasks=2 * len(FAMILY_NAMES))


def test_registry_covers_the_policy():
    expected = {
        "cancel_within_24h", "cancel_airline_cancelled", "cancel_business", "cancel_insured",
        "cancel_refused", "transfer_flown_cancel", "change_flight",
        "change_flight_basic_refused", "change_cabin", "add_bags", "update_passengers",
        "add_insurance_refused", "add_passenger_refused", "book_one_way", "book_round_trip",
        "book_payment_limit", "compensation_cancelled", "compensation_delayed",
        "compensation_refused", "info_gift_card_balance", "info_reservation_total",
        "info_upcoming_count", "transfer_out_of_scope",
    }
    assert set(FAMILY_NAMES) == expected == set(FAMILIES)


def test_every_family_appears_and_counts_are_balanced(domain):
    counts = Counter(t.family for t in domain.tasks)
    assert set(counts) == set(FAMILY_NAMES)
    assert set(counts.values()) == {2}
    uneven = Counter(family_schedule(50, FAMILY_NAMES, seed=3))
    assert max(uneven.values()) - min(uneven.values()) <= 1


def test_task_fields(domain):
    for index, task in enumerate(domain.tasks):
        assert task.task_id == f"gen-0-{index}-{task.family}"
        assert task.instruction.startswith(f"Your user id is {task.user_id}.")
        assert isinstance(task.scenario, Scenario) and task.scenario.family == task.family
        assert task.user_id in domain.data["users"]
        json.dumps(task.to_dict())  # plain JSON all the way down
        assert Scenario.from_dict(task.to_dict()["scenario"]) == task.scenario


def test_gold_actions_succeed_on_a_fresh_state(domain):
    for task in domain.tasks:
        state = domain.new_state()
        for action in task.actions:
            assert not domain.execute(state, action.name, action.kwargs).startswith("Error")


def test_expected_outcome_matches_gold_actions(domain):
    for task in domain.tasks:
        writes = [a for a in task.actions if a.name in WRITE_TOOLS]
        expected = task.scenario.expected
        if expected == "write":
            assert writes and len(writes) == len(task.scenario.confirmations)
            assert [a.name for a in writes] == [c.action for c in task.scenario.confirmations]
        elif expected == "transfer":
            assert [a.name for a in task.actions] == ["transfer_to_human_agents"]
        else:
            assert not writes
        assert bool(task.outputs) == (expected == "answer")


def test_cancel_families_isolate_their_policy_clause(domain):
    clause = {"cancel_within_24h": "within_24h", "cancel_airline_cancelled": "airline_cancelled",
              "cancel_business": "business", "cancel_insured": "insurance",
              "cancel_refused": None}
    for task in domain.tasks:
        if task.family in clause:
            res = domain.data["reservations"][task.scenario.reservation_id]
            assert all(s["date"] > TODAY for s in res["flights"])
            assert cancellation_rule(res, task.scenario.reason) == clause[task.family]


def test_refused_and_compensation_facts(domain):
    for task in domain.tasks:
        s = task.scenario
        res = domain.data["reservations"].get(s.reservation_id or "")
        if task.family == "change_flight_basic_refused":
            assert res["cabin"] == "basic_economy" and task.actions == []
        if task.family == "compensation_cancelled":
            travellers = len(res["passengers"])
            assert task.actions[0].kwargs == {"user_id": s.user_id, "amount": 100 * travellers}
        if task.family == "compensation_delayed":
            travellers = len(res["passengers"])
            assert task.actions[1].kwargs["amount"] == 50 * travellers
        if task.family == "transfer_flown_cancel":
            assert any(seg["date"] < TODAY for seg in res["flights"])


def test_info_outputs_are_hand_checkable(domain):
    for task in domain.tasks:
        if task.family == "info_gift_card_balance":
            methods = domain.data["users"][task.user_id]["payment_methods"].values()
            total = sum(m["amount"] for m in methods if m["source"] == "gift_card")
            assert task.outputs == [str(total)]
        if task.family == "info_reservation_total":
            res = domain.data["reservations"][task.scenario.reservation_id]
            assert task.outputs == [str(sum(p["amount"] for p in res["payment_history"]))]


def test_booking_payments_respect_the_limits(domain):
    for task in domain.tasks:
        if not task.family.startswith("book_"):
            continue
        kwargs = task.actions[0].kwargs
        methods = domain.data["users"][task.user_id]["payment_methods"]
        sources = Counter(methods[p["payment_id"]]["source"] for p in kwargs["payment_methods"])
        assert sources["certificate"] <= 1 and sources["credit_card"] <= 1
        assert sources["gift_card"] <= 3
        if task.family == "book_payment_limit":
            rejected = task.scenario.rejected_payment_ids
            assert len(rejected) == 2
            assert methods[rejected[0]]["source"] == methods[rejected[1]]["source"]


def test_split_payment_hand_computed():
    gift = {"source": "gift_card", "amount": 80, "id": "gift_card_1"}
    cert = {"source": "certificate", "amount": 250, "id": "certificate_2"}
    card = {"source": "credit_card", "id": "credit_card_3"}
    assert split_payment(400, [cert, gift, card]) == [
        {"payment_id": "certificate_2", "amount": 250}, {"payment_id": "gift_card_1", "amount": 80},
        {"payment_id": "credit_card_3", "amount": 70}]
    assert split_payment(60, [gift, card]) == [{"payment_id": "gift_card_1", "amount": 60}]
    assert split_payment(100, [gift]) is None  # not enough balance, no card
    assert split_payment(10, [card, dict(card, id="credit_card_4")]) is None  # two cards


def test_generation_is_deterministic_and_seed_dependent():
    a = [t.to_dict() for t in generate_domain(5, n_tasks=30).tasks]
    b = [t.to_dict() for t in generate_domain(5, n_tasks=30).tasks]
    c = [t.to_dict() for t in generate_domain(6, n_tasks=30).tasks]
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert json.dumps(a, sort_keys=True) != json.dumps(c, sort_keys=True)


def test_family_subset_and_unknown_family():
    only = generate_domain(1, n_tasks=6, families=["add_bags", "cancel_refused"])
    assert Counter(t.family for t in only.tasks) == {"add_bags": 3, "cancel_refused": 3}
    with pytest.raises(ValueError, match="unknown task families"):
        generate_domain(1, n_tasks=2, families=["no_such_family"])


def test_too_small_world_is_reported():
    with pytest.raises(ValueError, match="larger world"):
        generate_domain(0, n_tasks=1, families=["info_upcoming_count"], n_users=3,
                        n_reservations=1, n_flights=16, n_airports=4)


def _fake_tasks(per_family: dict[str, int]) -> list[Task]:
    return [Task(f"{family}-{i}", "u", "", [], family=family)
            for family, n in per_family.items() for i in range(n)]


def test_split_sizes_stratification_and_split_field():
    tasks = _fake_tasks({f"f{i}": 5 for i in range(12)})
    splits = split_tasks(tasks, covered_seen=16, uncovered_seen=24, unseen=10, seed=0)
    assert {k: len(v) for k, v in splits.items()} == \
        {"covered_seen": 16, "uncovered_seen": 24, "unseen": 10}
    ids = [t.task_id for split in splits.values() for t in split]
    assert len(ids) == len(set(ids))
    for name, split in splits.items():
        assert all(t.split == name for t in split)
    # splits at least as large as the number of families see every family
    assert {t.family for t in splits["covered_seen"]} == {f"f{i}" for i in range(12)}
    assert {t.family for t in splits["uncovered_seen"]} == {f"f{i}" for i in range(12)}
    assert len({t.family for t in splits["unseen"]}) == 10
    assert sum(t.split is None for t in tasks) == 60 - 50


def test_split_is_seeded_and_checks_sizes():
    first = split_tasks(_fake_tasks({"a": 6, "b": 6}), 2, 3, 4, seed=1)
    again = split_tasks(_fake_tasks({"a": 6, "b": 6}), 2, 3, 4, seed=1)
    other = split_tasks(_fake_tasks({"a": 6, "b": 6}), 2, 3, 4, seed=2)
    ids = {k: [t.task_id for t in v] for k, v in first.items()}
    assert ids == {k: [t.task_id for t in v] for k, v in again.items()}
    assert ids != {k: [t.task_id for t in v] for k, v in other.items()}
    with pytest.raises(ValueError, match="only 12 exist"):
        split_tasks(_fake_tasks({"a": 6, "b": 6}), 5, 5, 5)
    with pytest.raises(ValueError, match=">= 0"):
        split_tasks(_fake_tasks({"a": 6}), -1, 0, 0)


def test_generated_splits_cover_families_on_real_tasks():
    domain = generate_domain(2, n_tasks=100)
    splits = split_tasks(domain.tasks, seed=2)
    assert {t.family for t in splits["uncovered_seen"]} == set(FAMILY_NAMES)  # 24 >= 23
    assert len(splits["unseen"]) == 10
