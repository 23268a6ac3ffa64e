"""Grading on the 50 τ-bench airline tasks: gold replay, outputs, hashes, caching."""
from __future__ import annotations

import json
import time

import pytest

from agentgrpo.envs.airline import (
    AirlineDomain,
    DictState,
    canonical_json,
    load_tau_bench,
    multiset_hash,
    naive_hash,
)
from agentgrpo.envs.types import Action, Task

# Hand-derived from tasks_test.json: the tasks whose gold actions contain no write and
# that require no output (7 with no action at all, the rest only reads or a transfer).
NOTHING_TO_DO = {"12", "13", "15", "17", "18", "21", "24", "29", "35", "36", "37", "38", "39", "40",
                 "41", "42", "47", "48", "49"}


@pytest.fixture(scope="module", params=["tau_bench", "fixed"])
def domain(request, tau_bench_dir) -> AirlineDomain:
    return load_tau_bench(tau_bench_dir, compat=request.param)


def test_loader(tau_bench_dir):
    start = time.perf_counter()
    domain = load_tau_bench(tau_bench_dir)
    seconds = time.perf_counter() - start
    print(f"load_tau_bench: {seconds * 1000:.0f} ms")
    assert seconds < 2.0  # ~0.07 s measured; generous for a shared machine
    assert len(domain.tasks) == 50 and domain.compat == "tau_bench"
    assert [t.task_id for t in domain.tasks[:3]] == ["0", "1", "2"]
    task = domain.tasks[8]
    assert task.user_id == "mohamed_silva_9265" and task.outputs == ["327", "1000", "1786"]
    assert task.actions[-1].name == "book_reservation" and task.split == "test"
    assert "airline" in domain.policy.lower()
    assert len(domain.data["users"]) == 500 and len(domain.data["flights"]) == 300
    assert len(domain.data["reservations"]) == 2000
    with pytest.raises(ValueError, match="compat"):
        AirlineDomain(domain.data, [], "", "tau2")  # type: ignore[arg-type]


def test_gold_actions_and_outputs_earn_reward_one(domain):
    for task in domain.tasks:
        state, observations = domain.replay(task.actions)
        errors = [o for o in observations if o.startswith("Error: ")]
        assert not errors, (task.task_id, errors)
        result = domain.grade(state, task, [f"Here you go: {', '.join(task.outputs)}."])
        assert result.reward == 1.0 and result.db_match, task.task_id
        assert all(result.outputs_found.values())


def test_empty_episode_earns_reward_only_when_nothing_is_required(domain):
    computed = {t.task_id for t in domain.tasks
                if not t.outputs and not any(a.name in domain.write_tools for a in t.actions)}
    assert computed == NOTHING_TO_DO
    for task in domain.tasks:
        expected = 1.0 if task.task_id in NOTHING_TO_DO else 0.0
        assert domain.reward(domain.new_state(), task, []) == expected, task.task_id


def test_outputs_are_matched_case_insensitively_without_commas(domain):
    task = domain.tasks[8]  # outputs 327, 1000, 1786
    state, _ = domain.replay(task.actions)
    assert domain.reward(state, task, ["It costs $1,786 in total.", "Refund: 327 and 1,000."]) == 1.0
    result = domain.grade(state, task, ["It costs $1,786.", "Refund: 327."])
    assert result.reward == 0.0 and result.db_match
    assert result.outputs_found == {"327": True, "1000": False, "1786": True}
    # Right words, wrong database: still 0.
    assert domain.reward(domain.new_state(), task, ["327 1000 1786"]) == 0.0
    info = domain.tasks[44]  # outputs ["4"], no writes
    assert domain.reward(domain.new_state(), info, ["You have 4 reservations"]) == 1.0


def test_hash_is_type_sensitive_and_key_order_free(domain):
    assert canonical_json({"b": 1, "a": [1, 2.0]}) == canonical_json({"a": [1, 2.0], "b": 1})
    assert naive_hash({"x": 250}) != naive_hash({"x": 250.0})
    assert naive_hash({"x": 1}) != naive_hash({"x": True})
    # Task 0 paid with 250.0 instead of 250: the same money, a different database.
    task = domain.tasks[0]
    kwargs = json.loads(json.dumps(task.actions[-1].kwargs))
    kwargs["payment_methods"][0]["amount"] = float(kwargs["payment_methods"][0]["amount"])
    state = domain.new_state()
    observation = domain.execute(state, "book_reservation", kwargs)
    assert not observation.startswith("Error: ")
    assert domain.grade(state, task, []).db_match is False


def test_edit_and_undo_returns_to_the_base_hash(domain):
    state = domain.new_state()
    base_hash = state.db_hash()
    original = domain.data["reservations"]["YAX4DR"]["passengers"]
    renamed = [{**original[0], "first_name": "Zed"}, original[1]]
    domain.execute(state, "update_reservation_passengers", {"reservation_id": "YAX4DR", "passengers": renamed})
    assert state.db_hash() != base_hash
    domain.execute(state, "update_reservation_passengers", {"reservation_id": "YAX4DR", "passengers": original})
    assert state.db_hash() == base_hash and state.num_touched == 1


def test_reset_is_constant_time_and_hash_costs_only_touched_records(tau_bench_dir):
    domain = load_tau_bench(tau_bench_dir)
    domain.new_state().db_hash()  # the base digests: once per domain
    start = time.perf_counter()
    states = [domain.new_state() for _ in range(10_000)]
    assert time.perf_counter() - start < 1.0  # ~1 µs each; a deep copy would be ~50 ms
    state = states[0]
    domain.execute(state, "cancel_reservation", {"reservation_id": "Z7GOZK"})
    domain.execute(state, "send_certificate", {"user_id": "mia_li_3668", "amount": 100})
    assert state.num_touched == 2
    start = time.perf_counter()
    for _ in range(100):
        state.db_hash()
    assert time.perf_counter() - start < 0.5  # ~10 µs each; a full hash is ~70 ms


def test_gold_hash_is_computed_once_per_task(tau_bench_dir):
    class CountingDomain(AirlineDomain):
        replays = 0

        def _compute_gold_hash(self, actions):
            CountingDomain.replays += 1
            return super()._compute_gold_hash(actions)

    base = load_tau_bench(tau_bench_dir)
    domain = CountingDomain(base.data, base.tasks, base.policy, copy_data=False)
    for _ in range(3):
        for task in domain.tasks:
            domain.reward(domain.new_state(), task, [])
    distinct = {json.dumps([a.to_dict() for a in t.actions], sort_keys=True) for t in domain.tasks}
    assert CountingDomain.replays == len(distinct) < 50  # tasks 4/5 and 6/7 share gold actions
    # A task object whose actions differ gets its own entry.
    edited = Task("x", "mia_li_3668", "", [Action("send_certificate", {"user_id": "mia_li_3668", "amount": 1})])
    domain.gold_hash(edited)
    assert CountingDomain.replays == len(distinct) + 1


def test_gold_states_fast_hash_equals_naive_method(tau_bench_dir):
    """On the real 5 MB database: every task's gold state, fast vs naive.

    (The exact materialized comparison runs on 1,000+ random sequences in
    test_airline_fuzz.py; here every record the overlay touched is compared exactly.)
    """
    domain = load_tau_bench(tau_bench_dir)
    data = domain.data
    base_naive = DictState(data).db_hash()
    assert base_naive == naive_hash(data)
    assert domain.new_state().db_hash() == multiset_hash(data)
    pairs = {(domain.new_state().db_hash(), base_naive)}
    for task in domain.tasks:
        fast, _ = domain.replay(task.actions)
        if not any(a.name in domain.write_tools for a in task.actions):
            assert fast.num_touched == 0
            pairs.add((fast.db_hash(), base_naive))
            continue
        naive, _ = domain.replay(task.actions, DictState(data))
        for table in ("users", "flights", "reservations"):
            for key, record in fast.items(table):
                if record is not data[table].get(key):  # touched by the overlay
                    assert json.dumps(record) == json.dumps(naive.get(table, key)), (task.task_id, key)
        pairs.add((fast.db_hash(), naive.db_hash()))
    fast_hashes, naive_hashes = zip(*pairs)
    assert len(pairs) == len(set(fast_hashes)) == len(set(naive_hashes))
    assert len(pairs) > 25
    assert domain.base.verify()
