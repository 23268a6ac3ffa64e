"""Task samplers: the frontier's weights and EMA by hand, its draws, refills and state; uniform = the schedule;
a resumed frontier run draws exactly what the uninterrupted one draws."""
from __future__ import annotations

import json
import math
from collections import Counter

import pytest
from helpers import SMALL_ENV_OVERRIDES

from agentgrpo.config import ConfigError, load_config
from agentgrpo.envs.types import Task
from agentgrpo.tracking import read_metrics
from agentgrpo.train.grpo import GRPOTrainer
from agentgrpo.train.grpo_config import GRPOConfig
from agentgrpo.train.task_sampler import FrontierSampler, TaskSchedule, UniformSampler, make_task_sampler


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
