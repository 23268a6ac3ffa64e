"""What an evaluation plays: the do-nothing floor and write tasks of each task, and held-out task sets
(fresh worlds, split by where each family stands in training, validation apart from test)."""
from __future__ import annotations

import pytest
from helpers import small_env_config

from agentgrpo.config import ConfigError, load_config
from agentgrpo.envs.airline.factory import (
    HELDOUT_SEED_BASE,
    EnvConfig,
    SplitConfig,
    UserConfig,
    build_env,
    build_heldout,
    make_env,
    split_families,
)
from agentgrpo.envs.airline.tasks.generate import FAMILY_NAMES
from agentgrpo.eval.evaluator import EvalConfig
from agentgrpo.eval.tasks import eval_tasks, task_facts

NO_WRITE_SOLVED = {"cancel_refused", "change_flight_basic_refused", "add_insurance_refused", "add_passenger_refused",
                   "compensation_refused", "transfer_flown_cancel", "transfer_out_of_scope"}
"""Families whose correct outcome is a refusal or a transfer (docs/environment-generated.md): no write, no
output, so an agent that ends at once is graded 1 (the transfer tool is terminal and not replayed)."""
ANSWER_ONLY = {"info_gift_card_balance", "info_reservation_total", "info_upcoming_count"}
"""Families graded by an output alone: no write, but doing nothing scores 0."""


def expected_facts(family: str) -> tuple[float, bool]:
    """(do-nothing reward, needs a write) read off the family table, not off the grader."""
    if family in NO_WRITE_SOLVED:
        return 1.0, False
    return 0.0, family not in ANSWER_ONLY


def test_facts_follow_the_family_table_and_an_empty_episode_in_the_real_env():
    bundle = build_env(small_env_config())
    for split in ("covered_seen", "uncovered_seen", "unseen", "validation"):
        for task in bundle.splits[split]:
            facts = task_facts(bundle, task)
            assert (facts.do_nothing, facts.write) == expected_facts(task.family), task.task_id
            env = make_env(bundle, task, small_env_config(), user_seed=0)
            env.reset()
            assert env.finish("user_stop").reward == facts.do_nothing  # the agent ended at once
            env.reset()
            assert env.finish("max_turns").reward == 0.0  # a stall until the cap scores nothing


def test_do_nothing_floor_and_write_tasks_of_the_default_eval_world():
    bundle = build_env(load_config(EvalConfig, [], defaults="eval.yaml").env)
    tasks = [t for s in ("covered_seen", "uncovered_seen", "unseen") for t in bundle.splits[s]]
    facts = [task_facts(bundle, t) for t in tasks]
    # by the family table: 4 of 16 covered, 7 of 24 uncovered, 4 of 10 unseen are refusals/transfers
    assert [sum(expected_facts(t.family)[0] for t in bundle.splits[s]) for s in ("covered_seen", "uncovered_seen",
                                                                                  "unseen")] == [4, 7, 4]
    assert sum(f.do_nothing for f in facts) / len(tasks) == pytest.approx(15 / 50)
    assert sum(f.write for f in facts) == 29  # 50 − 15 floor tasks − 6 answer-only tasks


def test_tau_bench_facts_match_the_gold_actions(tau_bench_dir):
    config = EnvConfig(source="tau_bench", data_dir=str(tau_bench_dir), user=UserConfig(kind="llm"))
    bundle = build_env(config)
    domain = bundle.domain
    for task in domain.tasks:
        facts = task_facts(bundle, task)
        assert facts.write == any(a.name in domain.write_tools for a in task.actions), task.task_id
        assert facts.do_nothing == float(not facts.write and not task.outputs), task.task_id
    unseen = [task_facts(bundle, t).do_nothing for t in bundle.splits["unseen"]]
    assert sum(unseen) == 4  # the seed's unseen 0.400 is what doing nothing scores there


def test_split_families_follow_the_training_splits():
    families = split_families(build_env(EnvConfig()))  # 16 / 24 tasks over 23 families: every family trained
    assert len(families["covered_seen"]) == 16 and len(families["uncovered_seen"]) == 7
    assert families["unseen"] == [] and sorted(families["validation"]) == sorted(FAMILY_NAMES)
    small = split_families(build_env(small_env_config()))  # 4 + 4 training tasks: 8 families trained, 15 not
    assert (len(small["covered_seen"]), len(small["uncovered_seen"]), len(small["unseen"])) == (4, 4, 15)
    assert not set(small["covered_seen"]) & set(small["uncovered_seen"])
    assert set(small["validation"]) == set(small["covered_seen"]) | set(small["uncovered_seen"])


def test_heldout_sets_are_fresh_labelled_by_family_and_grow_by_prefix():
    env = small_env_config()
    training = build_env(env)
    families = split_families(training)
    names = ["covered_seen", "uncovered_seen", "unseen"]
    worlds = build_heldout(env, names, 30, training=training)
    pool = {t.task_id for t in training.domain.tasks} | {t.task_id for t in training.splits["validation"]}
    tasks = {name: [t for w in worlds for t in w.splits[name]] for name in names}
    for name in names:
        assert len(tasks[name]) == 30 and {t.split for t in tasks[name]} == {name}
        assert {t.family for t in tasks[name]} == set(families[name])  # every family of the split, no other
    ids = [t.task_id for name in names for t in tasks[name]]
    assert len(set(ids)) == 90 and not set(ids) & pool
    assert all(w.world_seed >= HELDOUT_SEED_BASE["test"] for w in worlds)
    smaller = build_heldout(env, ["unseen"], 12, training=training)
    assert [t.task_id for w in smaller for t in w.splits["unseen"]] == [t.task_id for t in tasks["unseen"][:12]]
    other_seed = build_heldout(env, ["unseen"], 12, seed=1, training=training)
    assert not {t.task_id for w in other_seed for t in w.splits["unseen"]} & set(ids)


def test_heldout_validation_comes_from_worlds_of_its_own():
    env = small_env_config()
    test_worlds = build_heldout(env, ["covered_seen", "uncovered_seen"], 10)
    val_worlds = build_heldout(env, ["validation"], 10)
    assert {w.world_seed for w in test_worlds}.isdisjoint({w.world_seed for w in val_worlds})
    assert all(w.world_seed >= HELDOUT_SEED_BASE["validation"] for w in val_worlds)
    val = [t for w in val_worlds for t in w.splits["validation"]]
    assert len(val) == 10 and {t.family for t in val} <= set(split_families(build_env(env))["validation"])


def test_default_training_splits_leave_the_heldout_unseen_split_empty():
    config = load_config(EvalConfig, ["tasks_per_split=5", "splits=[uncovered_seen,unseen]"], defaults="eval.yaml")
    tasks = eval_tasks(config)
    assert [t.split for t in tasks] == ["uncovered_seen"] * 5
    with pytest.raises(ConfigError, match="no held-out task"):
        eval_tasks(load_config(EvalConfig, ["tasks_per_split=5", "splits=[unseen]"], defaults="eval.yaml"))


def test_eval_config_checks_the_heldout_keys():
    with pytest.raises(ConfigError, match="tasks_per_split=-1"):
        EvalConfig(tasks_per_split=-1)
    with pytest.raises(ConfigError, match="heldout_seed"):
        EvalConfig(heldout_seed=-2)
    with pytest.raises(ConfigError, match="splits"):
        EvalConfig(splits=["validation", "unseen"])  # validation is never pooled with the test splits
    with pytest.raises(ConfigError, match="env.seed"):
        EvalConfig(tasks_per_split=5, env=EnvConfig(seed=HELDOUT_SEED_BASE["test"]))
    with pytest.raises(ConfigError, match="tasks_per_split"):
        EvalConfig(tasks_per_split=5, env=EnvConfig(source="tau_bench", data_dir="x", user=UserConfig(kind="llm"),
                                                   splits=SplitConfig()))
    assert EvalConfig(splits=["validation"]).splits == ["validation"]


def test_the_oracle_solves_a_heldout_evaluation(tmp_path):
    from agentgrpo.eval.evaluator import evaluate

    config = EvalConfig(policy="oracle", env=small_env_config(), tasks_per_split=6, trials=1, out_dir=str(tmp_path),
                        progress=False)
    report = evaluate(config)
    assert report.split_sizes == {"covered_seen": 6, "uncovered_seen": 6, "unseen": 6}
    assert report.metrics["pass^k"][1] == 1.0 and report.metrics["write_pass^1"] == 1.0
    assert report.task_set["source"] == "heldout" and report.task_set["worlds"][0] == HELDOUT_SEED_BASE["test"]
    assert len(report.task_set["families"]["unseen"]) == 15
    assert "6 fresh tasks per split from" in (tmp_path / "eval.md").read_text()


def test_tasks_per_family_draws_every_family_alike():
    """With tasks_per_family the test set holds N tasks of every family of its splits (per-split
    draws give the 7 uncovered families 2.3 times the weight of the 16 covered ones)."""
    from collections import Counter

    from agentgrpo.config import load_config

    config = load_config(EvalConfig, ["splits=[covered_seen,uncovered_seen]", "tasks_per_family=3"],
                         defaults="eval.yaml")
    tasks = eval_tasks(config)
    counts = Counter((t.split, t.task.family) for t in tasks)
    assert set(counts.values()) == {3} and len(counts) == len({t.task.family for t in tasks}) == 23
    assert [t.task.task_id for t in eval_tasks(config)] == [t.task.task_id for t in tasks]  # deterministic
    larger = eval_tasks(load_config(EvalConfig, ["splits=[covered_seen,uncovered_seen]", "tasks_per_family=4"],
                                    defaults="eval.yaml"))
    assert {t.task.task_id for t in tasks} <= {t.task.task_id for t in larger}  # a larger set starts with it
    per_split = Counter(t.split for t in eval_tasks(load_config(
        EvalConfig, ["splits=[covered_seen,uncovered_seen]", "tasks_per_split=46"], defaults="eval.yaml")))
    assert per_split["covered_seen"] == per_split["uncovered_seen"] == 46


def test_tasks_per_family_and_per_split_are_exclusive():
    from agentgrpo.config import ConfigError, load_config

    with pytest.raises((ConfigError, ValueError), match="tasks_per_family"):
        load_config(EvalConfig, ["tasks_per_family=2", "tasks_per_split=4"], defaults="eval.yaml")
    with pytest.raises((ConfigError, ValueError), match="tasks_per_family"):
        load_config(EvalConfig, ["tasks_per_family=-1"], defaults="eval.yaml")
