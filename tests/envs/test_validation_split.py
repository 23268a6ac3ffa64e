"""The validation split: training families, held out of training, never the test split."""
from __future__ import annotations

import pytest

from agentgrpo.config import ConfigError, load_config
from agentgrpo.envs.airline.factory import SPLIT_NAMES, TRAIN_SPLITS, EnvConfig, SplitConfig, UserConfig, build_env


def ids(tasks) -> list[str]:
    return [task.task_id for task in tasks]


def test_generated_validation_tasks_are_new_tasks_of_the_training_families():
    with_val, without = build_env(EnvConfig()), build_env(EnvConfig(splits=SplitConfig(validation=0)))
    assert with_val.split_sizes == {"covered_seen": 16, "uncovered_seen": 24, "unseen": 10, "validation": 8}
    for name in SPLIT_NAMES:  # the pool and its three splits do not depend on validation
        assert ids(with_val.splits[name]) == ids(without.splits[name])
    validation = with_val.splits["validation"]
    taken = {task.task_id for name in SPLIT_NAMES for task in with_val.splits[name]}
    assert not taken & set(ids(validation)) and len(set(ids(validation))) == 8
    train_families = {task.family for name in TRAIN_SPLITS for task in with_val.splits[name]}
    assert {task.family for task in validation} <= train_families
    assert {task.split for task in validation} == {"validation"}
    assert ids(with_val.domain.tasks) == ids(without.domain.tasks)  # not added to the pool
    assert with_val.task_by_id(validation[0].task_id) is validation[0]
    assert ids(build_env(EnvConfig()).splits["validation"]) == ids(validation)  # reproducible


def test_few_training_families_still_give_validation_tasks_of_those_families():
    bundle = build_env(EnvConfig(n_tasks=6, splits=SplitConfig(covered_seen=1, uncovered_seen=1, unseen=2,
                                                               validation=5)))
    families = {task.family for name in TRAIN_SPLITS for task in bundle.splits[name]}
    assert len(bundle.splits["validation"]) == 5 and {t.family for t in bundle.splits["validation"]} <= families


def test_validation_needs_training_tasks_and_is_checked():
    with pytest.raises(ConfigError, match="env.splits.validation"):
        build_env(EnvConfig(n_tasks=4, splits=SplitConfig(covered_seen=0, uncovered_seen=0, unseen=4)))
    with pytest.raises(ConfigError, match="env.splits.validation=-1"):
        load_config(EnvConfig, ["splits.validation=-1"])
    assert load_config(EnvConfig, []).splits.validation == 8


def test_tau_bench_validation_is_held_out_of_uncovered_seen(tau_bench_dir):
    def config(**splits) -> EnvConfig:
        return EnvConfig(source="tau_bench", data_dir=str(tau_bench_dir), user=UserConfig(kind="llm"),
                         splits=SplitConfig(**splits))

    seed, held = build_env(config()), build_env(config(validation=4))
    assert seed.split_sizes["validation"] == 0  # the default keeps the seed's 16/24/10
    assert held.split_sizes == {"covered_seen": 16, "uncovered_seen": 20, "unseen": 10, "validation": 4}
    assert ids(held.splits["covered_seen"]) == ids(seed.splits["covered_seen"])
    assert ids(held.splits["unseen"]) == ids(seed.splits["unseen"])  # the test split is the seed's
    assert set(ids(held.splits["uncovered_seen"])) | set(ids(held.splits["validation"])) == set(
        ids(seed.splits["uncovered_seen"]))
    with pytest.raises(ConfigError, match="held out of uncovered_seen"):
        build_env(config(uncovered_seen=3, validation=3))
