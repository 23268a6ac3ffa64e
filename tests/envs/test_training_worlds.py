"""env.train_worlds: more generated worlds to train in, labelled by world 0's split families."""
from __future__ import annotations

import pytest

from agentgrpo.config import ConfigError
from agentgrpo.envs.airline.factory import HELDOUT_SEED_BASE, TRAIN_WORLD_SEED_BASE
from agentgrpo.envs.config import EnvConfig, WorldConfig
from agentgrpo.envs.registry import (
    TRAIN_SPLITS,
    VALIDATION_SPLIT,
    build_env,
    build_heldout,
    build_training_worlds,
    split_families,
)

WORLD = WorldConfig(n_users=60, n_reservations=120)


def test_one_world_is_the_env_itself():
    config = EnvConfig(world=WORLD)
    [world] = build_training_worlds(config)
    assert [t.task_id for t in world.tasks()] == [t.task_id for t in build_env(config).tasks()]


def test_extra_worlds_add_training_families_only_and_leave_test_and_validation_alone():
    config = EnvConfig(world=WORLD, train_worlds=3)
    base = build_env(config)
    worlds = build_training_worlds(config, training=base)
    assert worlds[0] is base and len(worlds) == 3
    seeds = [w.world_seed for w in worlds]
    assert seeds == [0, TRAIN_WORLD_SEED_BASE + 1, TRAIN_WORLD_SEED_BASE + 2]
    assert all(s < HELDOUT_SEED_BASE["test"] for s in seeds)
    families = split_families(config, base)
    for world in worlds[1:]:
        assert world.splits["unseen"] == [] and world.splits[VALIDATION_SPLIT] == []
        for name in TRAIN_SPLITS:
            assert world.splits[name], name
            assert {t.family for t in world.splits[name]} <= set(families[name])
            assert all(t.split == name for t in world.splits[name])
        # its tasks act on its own world: every task's user exists there
        users = world.domain.new_state().materialize()["users"]
        assert all(t.user_id in users for t in world.tasks(TRAIN_SPLITS))
    ids = [t.task_id for w in worlds for t in w.tasks(TRAIN_SPLITS)]
    assert len(ids) == len(set(ids))  # task ids name their world
    # deterministic, and none of them is a held-out world
    again = build_training_worlds(config)
    assert [t.task_id for w in again for t in w.tasks()] == [t.task_id for w in worlds for t in w.tasks()]
    heldout = build_heldout(config, ["covered_seen", VALIDATION_SPLIT], 20, training=base)
    assert {b.world_seed for b in heldout}.isdisjoint(seeds)


@pytest.mark.parametrize("overrides, key", [
    ({"train_worlds": 0}, "env.train_worlds"),
    ({"train_worlds": 2, "seed": 60_000}, "env.seed"),
    ({"train_worlds": 2, "domain": "toy"}, "env.train_worlds"),
])
def test_bad_train_worlds_name_the_key(overrides, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        build_training_worlds(EnvConfig(**overrides))


def test_tau_bench_has_one_world(tmp_path):
    with pytest.raises(ConfigError, match=r"env\.train_worlds"):
        EnvConfig(source="tau_bench", data_dir=str(tmp_path), train_worlds=2)
