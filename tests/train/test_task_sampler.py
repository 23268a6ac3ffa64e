"""Task samplers: the frontier's weights and EMA by hand, its draws, refills and state; uniform = the schedule;
a resumed frontier run draws exactly what the uninterrupted one draws."""
from __future__ import annotations

import json
import math
from collections import Counter

import pytest
from helpers import SMALL_ENV_OVERRIDES

from agentgrpo.config import ConfigError, load_config
from agentgrpo.envs.types import Action, Task
from agentgrpo.tracking import read_metrics
from agentgrpo.train.grpo import GRPOTrainer
from agentgrpo.train.grpo_config import GRPOConfig
from agentgrpo.train.task_sampler import (
    FrontierSampler,
    Strata,
    TaskSchedule,
    UniformSampler,
    is_write_task,
    make_task_sampler,
)


def tasks(*ids: str) -> list[Task]:
    return [Task(task_id=i, user_id="u", instruction="", actions=[]) for i in ids]


def test_frontier_weights_are_learnability_with_a_floor_and_an_optimistic_prior():
    sampler = FrontierSampler(tasks("a", "b", "c", "d", "e"), 2, seed=0, floor=0.05, ema=0.5)
    sampler.observe({"a": [1, 1, 1, 1], "b": [0, 0, 0, 0], "c": [1, 0, 0, 0], "d": [1, 1, 0, 0]})
    # p = 1 and p = 0 weigh the floor; p = 1/4 → 3/16; p = 1/2 → 1/4; "e", never tried → 1/4
    assert sampler.weights() == pytest.approx({"a": 0.05, "b": 0.05, "c": 0.1875, "d": 0.25, "e": 0.25})
    sampler.observe({"c": [1, 1, 1, 1], "b": [1, 0, 0, 0]})  # EMA 0.5: c → (1/4 + 1)/2, b → (0 + 1/4)/2
    assert sampler.stats["c"] == (0.625, 2) and sampler.stats["b"] == (0.125, 2)
    assert sampler.weight("c") == pytest.approx(0.625 * 0.375)
    assert sampler.weight("b") == pytest.approx(0.125 * 0.875)
    sampler.observe({"e": [math.nan, 1.0]})  # non-finite outcomes are not evidence
    assert sampler.stats["e"] == (1.0, 1)


def test_frontier_by_family_pools_a_familys_groups_into_one_rate():
    pool = [Task(task_id=i, user_id="u", instruction="", actions=[], family=i[0]) for i in ("a1", "a2", "b1", "c1")]
    sampler = FrontierSampler(pool, 2, seed=0, floor=0.05, ema=0.5, by="family")
    sampler.observe({"a1": [1, 0, 0, 0], "c1": [1, 1]})
    # a2 was never tried, but its family's one group says p = 1/4 → 3/16; c: p = 1 → the floor; b untried → 1/4
    assert sampler.weights() == pytest.approx({"a1": 0.1875, "a2": 0.1875, "b1": 0.25, "c1": 0.05})
    sampler.observe({"a2": [1, 1, 1, 1]})  # the family's EMA: (1/4 + 1)/2
    assert sampler.stats == {"a": (0.625, 2), "c": (1.0, 1)}
    metrics = sampler.metrics()
    assert metrics["sampler/untried_frac"] == 0.25 and metrics["sampler/success_mean"] == pytest.approx(
        (0.625 + 0.625 + 1.0) / 3)
    state = json.loads(json.dumps(sampler.state_dict()))
    restored = FrontierSampler(pool, 2, seed=0, floor=0.05, ema=0.5, by="family")
    restored.load_state_dict(state, step=1)
    assert restored.weights() == sampler.weights() and restored.draw(1, 0) == sampler.draw(1, 0)
    with pytest.raises(ConfigError, match="trainer.frontier_by=task"):
        FrontierSampler(pool, 2, seed=0, floor=0.05, ema=0.5).load_state_dict(state, step=1)
    by_task = FrontierSampler(pool, 2, seed=0, floor=0.05, ema=0.5)
    by_task.load_state_dict({"kind": "frontier", "pool": [t.task_id for t in pool], "stats": {"a1": [0.5, 1]}}, 1)
    assert by_task.weight("a1") == 0.25  # a checkpoint from before frontier_by: statistics by task


def test_frontier_draws_follow_the_weights_and_prefer_tasks_not_yet_drawn():
    sampler = FrontierSampler(tasks("solved", "frontier", "failed"), 1, seed=3, floor=0.02, ema=1.0)
    sampler.observe({"solved": [1, 1], "frontier": [1, 0], "failed": [0, 0]})
    counts = Counter(sampler.draw(step, 0)[0].task_id for step in range(2000))
    # weights 0.02 : 0.25 : 0.02 → shares 0.068 : 0.862 : 0.068 for one draw
    assert counts["frontier"] / 2000 == pytest.approx(0.25 / 0.29, abs=0.03)
    assert counts["solved"] > 0 and counts["failed"] > 0  # the floor keeps saturated tasks in play
    assert sampler.draw(7, 1, exclude={"frontier"})[0].task_id != "frontier"
    assert sampler.draw(7, 1) == sampler.draw(7, 1)  # a function of (seed, step, round)
    three = FrontierSampler(tasks("a", "b"), 3, seed=0, floor=0.05, ema=0.5).draw(0, 0)
    assert sorted(t.task_id for t in three[:2]) == ["a", "b"]  # distinct first; a small pool is drawn again


def test_uniform_round_zero_is_the_schedule_and_later_rounds_avoid_drawn_tasks():
    pool = tasks(*"abcdefg")
    uniform = make_task_sampler("uniform", pool, 3, seed=5)
    assert isinstance(uniform, UniformSampler)
    schedule = TaskSchedule(pool, 3, seed=5)
    assert all(uniform.draw(step, 0) == schedule.for_step(step) for step in range(6))
    first = {t.task_id for t in uniform.draw(2, 0)}
    again = uniform.draw(2, 1, exclude=first)
    assert len(again) == 3 and not first & {t.task_id for t in again}
    assert uniform.state_dict() == {"kind": "uniform"}


def test_refill_adds_fresh_tasks_and_a_restored_sampler_rebuilds_the_same_pool():
    def refill(step: int) -> list[Task]:
        return tasks(f"fresh-{step}")

    sampler = FrontierSampler(tasks("a", "b"), 2, seed=0, floor=0.05, ema=0.5, refill=refill)
    for step in range(3):
        drawn = sampler.draw(step, 0)
        sampler.observe({t.task_id: [float(step % 2)] * 2 for t in drawn})
    assert list(sampler.pool) == ["a", "b", "fresh-0", "fresh-1", "fresh-2"]
    state = json.loads(json.dumps(sampler.state_dict()))  # through the checkpoint's JSON
    restored = FrontierSampler(tasks("a", "b"), 2, seed=0, floor=0.05, ema=0.5, refill=refill)
    restored.load_state_dict(state, step=3)
    assert restored.stats == sampler.stats and list(restored.pool) == list(sampler.pool)
    assert restored.draw(3, 0) == sampler.draw(3, 0)
    without_refill = FrontierSampler(tasks("a", "b"), 2, seed=0, floor=0.05, ema=0.5)
    with pytest.raises(ConfigError, match="task pool differs"):
        without_refill.load_state_dict(state, step=3)


WRITES = frozenset({"cancel_reservation", "book_reservation"})


def mixed_pool() -> list[Task]:
    """Three write tasks (w0-w2) and five that need no change (r0-r4), interleaved."""
    def task(task_id: str, *tools: str) -> Task:
        return Task(task_id=task_id, user_id="u", instruction="", actions=[Action(tool) for tool in tools])
    return [task("r0", "get_user_details"), task("w0", "get_user_details", "cancel_reservation"), task("r1"),
            task("r2", "search_direct_flight"), task("w1", "book_reservation"), task("r3"), task("r4"),
            task("w2", "get_reservation_details", "cancel_reservation")]


def is_write(drawn: list[Task]) -> list[bool]:
    return [is_write_task(t, WRITES) for t in drawn]


def test_strata_quota_rounds_the_share_of_k():
    assert [Strata(share, WRITES).quota(4) for share in (0.0, 0.1, 0.25, 0.5, 0.6, 1.0)] == [0, 0, 1, 2, 2, 4]
    write, other = Strata(0.5, WRITES).split(mixed_pool())
    assert [t.task_id for t in write] == ["w0", "w1", "w2"]
    assert [t.task_id for t in other] == ["r0", "r1", "r2", "r3", "r4"]


@pytest.mark.parametrize("kind", ["uniform", "frontier"])
def test_stratified_draws_hold_the_write_quota_in_every_round(kind):
    strata = Strata(0.5, WRITES)  # 2 of 4: the pool's own share is 3/8
    sampler = make_task_sampler(kind, mixed_pool(), 4, seed=1, strata=strata)
    for step in range(12):
        first = sampler.draw(step, 0)
        assert is_write(first) == [True, True, False, False]
        if kind == "frontier":  # (the uniform schedule may repeat a task across an epoch's end)
            assert len({t.task_id for t in first}) == 4  # distinct within each stratum
        again = sampler.draw(step, 1, exclude={t.task_id for t in first})
        assert is_write(again) == [True, True, False, False]
        fresh = [t.task_id for t in again if t.task_id not in {u.task_id for u in first}]
        assert len(fresh) >= 3  # 1 write task and all 3 others not yet drawn come first
        sampler.observe({t.task_id: [1.0, 0.0] for t in first})


def test_stratified_uniform_round_zero_is_one_schedule_per_stratum():
    sampler = UniformSampler(mixed_pool(), 4, seed=2, strata=Strata(0.25, WRITES))
    write, other = Strata(0.25, WRITES).split(mixed_pool())
    by_stratum = (TaskSchedule(write, 1, seed=2, name="tasks:write"),
                  TaskSchedule(other, 3, seed=2, name="tasks:no_write"))
    for step in range(6):
        assert sampler.draw(step, 0) == [*by_stratum[0].for_step(step), *by_stratum[1].for_step(step)]
    # an epoch of each stratum: every write task once in 3 steps, every other task once in 5 steps of 3
    assert sorted(t.task_id for s in range(3) for t in sampler.draw(s, 0)[:1]) == ["w0", "w1", "w2"]
    assert Counter(t.task_id for s in range(5) for t in sampler.draw(s, 0)[1:]) == dict.fromkeys(
        ["r0", "r1", "r2", "r3", "r4"], 3)


def test_stratified_frontier_draws_follow_the_weights_within_each_stratum():
    sampler = FrontierSampler(mixed_pool(), 2, seed=4, floor=0.02, ema=1.0, strata=Strata(0.5, WRITES))
    sampler.observe({"w0": [1, 1], "w1": [1, 0], "w2": [0, 0], "r0": [1, 1], "r1": [1, 1], "r2": [1, 1],
                     "r3": [1, 1], "r4": [1, 0]})
    counts = Counter(t.task_id for step in range(2000) for t in sampler.draw(step, 0))
    assert sum(counts[w] for w in ("w0", "w1", "w2")) == 2000  # one write task a draw, always
    # within the write stratum, weights 0.02 : 0.25 : 0.02 → w1 drawn 0.25 / 0.29 of the time
    assert counts["w1"] / 2000 == pytest.approx(0.25 / 0.29, abs=0.03)
    assert counts["r4"] / 2000 == pytest.approx(0.25 / 0.33, abs=0.03)  # 0.25 against four at 0.02


def test_a_stratum_with_a_quota_and_no_task_is_refused_naming_the_key():
    reads = [t for t in mixed_pool() if not is_write_task(t, WRITES)]
    for kind in ("uniform", "frontier"):
        with pytest.raises(ConfigError, match="trainer.write_task_share=0.5 asks for 1 write task"):
            make_task_sampler(kind, reads, 2, seed=0, strata=Strata(0.5, WRITES))
    assert is_write(make_task_sampler("uniform", reads, 2, seed=0, strata=Strata(0.0, WRITES)).draw(0, 0)) == [
        False, False]  # share 0: the write stratum is never asked for
    with pytest.raises(ConfigError, match="trainer.write_task_share"):
        load_config(GRPOConfig, ["trainer.write_task_share=1.5"], defaults="grpo.yaml")


def test_the_trainer_draws_its_airline_tasks_by_the_write_share(tiny_policy_dir, tmp_path):
    trainer = GRPOTrainer(frontier_config(tiny_policy_dir, tmp_path / "run", 1, "trainer.tasks_per_step=4",
                                          "trainer.mini_batch_size=8", "trainer.write_task_share=0.75"))
    writes = trainer.groups.write_tools
    assert {"book_reservation", "cancel_reservation"} <= writes
    for step in range(5):
        drawn = trainer.groups.task_sampler.draw(step, 0)
        assert [is_write_task(t, writes) for t in drawn] == [True, True, True, False]


def frontier_config(policy_dir, run_dir, steps: int, *overrides: str) -> GRPOConfig:
    return load_config(GRPOConfig, [
        *SMALL_ENV_OVERRIDES, f"policy.init={policy_dir}", f"run_dir={run_dir}", "experiment=joint",
        "rollout.max_turns=2", "rollout.max_new_tokens=8", "rollout.max_total_tokens=900",
        f"trainer.steps={steps}", "trainer.save_every=1", "trainer.keep_last=0", "trainer.tasks_per_step=2",
        "trainer.group_size=2", "trainer.mini_batch_size=2", "trainer.micro_batch_size=2", "trainer.lr=1e-3",
        "trainer.task_sampler=frontier", "trainer.dynamic_sampling=true", "trainer.informative_by=reward",
        "trainer.max_generation_rounds=2", "trainer.lld_diagnostic=false", "logging.progress=false", *overrides,
    ], defaults="grpo.yaml")


def sampler_state(run_dir, step: int) -> dict:
    state = json.loads((run_dir / "checkpoints" / f"step_{step:06d}" / "trainer_state.json").read_text())
    return state["task_sampler"]


def test_a_resumed_frontier_run_draws_and_learns_exactly_what_the_uninterrupted_run_does(tiny_policy_dir, tmp_path):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    GRPOTrainer(frontier_config(tiny_policy_dir, straight, 3)).train()
    GRPOTrainer(frontier_config(tiny_policy_dir, resumed, 1)).train()
    trainer = GRPOTrainer(frontier_config(tiny_policy_dir, resumed, 3), resume=True)
    assert trainer.start_step == 1 and trainer.groups.task_sampler.stats  # restored, not fresh
    trainer.train()
    for step in (1, 2, 3):
        assert sampler_state(straight, step) == sampler_state(resumed, step)
    final = sampler_state(straight, 3)
    assert sum(n for _, n in final["stats"].values()) >= 3 * 2  # every round's groups were observed
    a, b = read_metrics(straight / "metrics.jsonl"), read_metrics(resumed / "metrics.jsonl")
    drop_perf = [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in a]
    assert drop_perf == [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in b]
    assert all("sampler/untried_frac" in r and r["rollout/generation_rounds"] >= 1 for r in a)


def test_the_trainer_passes_a_refill_to_the_frontier_pool(tiny_policy_dir, tmp_path):
    fresh: list[Task] = []

    def refill(step: int) -> list[Task]:  # a domain that generates tasks: here the unseen split's
        return fresh if step == 0 else []

    trainer = GRPOTrainer(frontier_config(tiny_policy_dir, tmp_path, 1), task_refill=refill)
    fresh.extend(trainer.groups.bundle.tasks(["unseen"]))
    assert not {t.task_id for t in fresh} & set(trainer.groups.task_sampler.pool)
    trainer.groups.task_sampler.draw(0, 0)
    assert {t.task_id for t in fresh} <= set(trainer.groups.task_sampler.pool)
    assert trainer.groups.task_sampler.metrics()["sampler/pool_tasks"] == len(trainer.groups.train_tasks) + len(fresh)
