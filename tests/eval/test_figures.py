"""Headline figures and the grid's statistics, against hand-computed values."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from agentgrpo.eval.figures import TAU_BENCH_AIRLINE_KINDS, figure_weights, task_kind, weighted_mean
from agentgrpo.eval.stats import (
    gatekeep_holm,
    hierarchical_bootstrap,
    minimum_detectable_effect,
    sign_flip_p_value,
    variance_components,
)


def row(family: str, write: bool, do_nothing: float) -> dict:
    return {"family": family, "write": write, "do_nothing": do_nothing}


# a write family with 2 tasks, a refusal family (no change) with 4, an info family (output) with 1
ROWS = [row("book", True, 0.0)] * 2 + [row("refuse", False, 1.0)] * 4 + [row("info", False, 0.0)]
PASS1 = [1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0]


def test_task_kinds():
    assert task_kind(True, 0.0) == "write" and task_kind(False, 1.0) == "no_change"
    assert task_kind(False, 0.0) == "output" and sum(TAU_BENCH_AIRLINE_KINDS.values()) == 50


def test_figures_by_hand():
    value = {f: weighted_mean(PASS1, figure_weights(ROWS, f)) for f in
             ("overall", "family", "write", "no_write", "tau_bench")}
    assert value["overall"] == pytest.approx(5 / 7)
    assert value["family"] == pytest.approx((0.5 + 1.0 + 0.0) / 3)  # every family alike
    assert value["write"] == pytest.approx(0.5) and value["no_write"] == pytest.approx(4 / 5)
    assert value["tau_bench"] == pytest.approx(0.6 * 0.5 + 0.38 * 1.0 + 0.02 * 0.0)


def test_tau_bench_weights_renormalise_over_the_kinds_present_and_need_facts():
    rows = ROWS[:6]
    assert weighted_mean(PASS1[:6], figure_weights(rows, "tau_bench")) == pytest.approx((30 * 0.5 + 19) / 49)
    assert figure_weights([{"family": "a", "write": None, "do_nothing": None}], "write") is None
    assert figure_weights(ROWS[2:], "write") is None  # no write task: no write figure


def test_tau_bench_pass1_of_a_do_nothing_agent_is_its_floor(tau_bench_dir):
    """On τ-bench's own 50 tasks the kinds are 30/19/1, so an agent that does nothing scores 0.38."""
    from agentgrpo.envs.config import EnvConfig, UserConfig
    from agentgrpo.envs.registry import build_env
    from agentgrpo.eval.tasks import task_facts

    bundle = build_env(EnvConfig(source="tau_bench", data_dir=str(tau_bench_dir), user=UserConfig(kind="llm")))
    tasks = [t for split in ("covered_seen", "uncovered_seen", "unseen") for t in bundle.splits[split]]
    facts = [task_facts(bundle, t) for t in tasks]
    kinds = [task_kind(f.write, f.do_nothing) for f in facts]
    assert {k: kinds.count(k) for k in TAU_BENCH_AIRLINE_KINDS} == TAU_BENCH_AIRLINE_KINDS
    rows = [row(t.family, f.write, f.do_nothing) for t, f in zip(tasks, facts)]
    pass1 = [f.do_nothing for f in facts]
    assert weighted_mean(pass1, figure_weights(rows, "overall")) == pytest.approx(0.38)


def test_hierarchical_interval_widens_with_seed_spread():
    rng = np.random.default_rng(0)
    task_effect = rng.normal(0.05, 0.3, size=200)
    same = np.stack([task_effect] * 3)
    spread = np.stack([task_effect + offset for offset in (-0.08, 0.0, 0.08)])
    narrow, wide = hierarchical_bootstrap(same), hierarchical_bootstrap(spread)
    assert narrow.value == pytest.approx(wide.value)  # the offsets cancel in the mean
    assert (wide.high - wide.low) > 1.5 * (narrow.high - narrow.low)
    # one seed: the same task bootstrap as over the seed-averaged values
    single = hierarchical_bootstrap(task_effect[None, :])
    assert single.value == pytest.approx(task_effect.mean()) and single.n == 200


def test_hierarchical_bootstrap_by_loop():
    """The vectorised resampling equals a loop that draws seeds, then tasks within strata."""
    rng = np.random.default_rng(3)
    values = rng.integers(-1, 2, size=(3, 8)).astype(float)
    weights = np.array([1, 1, 2, 2, 0.5, 0.5, 0.5, 0.5])
    strata = ["a", "a", "b", "b", "c", "c", "c", "c"]
    fast = hierarchical_bootstrap(values, weights, strata, resamples=300, seed=5)
    gen = np.random.default_rng(5)
    counts = np.zeros((300, 3))
    np.add.at(counts, (np.arange(300)[:, None], gen.integers(0, 3, (300, 3))), 1.0)
    draws_tasks = np.empty((300, 8), dtype=int)
    for label in ["a", "b", "c"]:
        members = np.flatnonzero(np.array(strata) == label)
        draws_tasks[:, members] = members[gen.integers(0, members.size, (300, members.size))]
    loop = []
    for r in range(300):
        seed_mean = (counts[r] @ values) / 3
        picked = draws_tasks[r]
        loop.append((weights[picked] * seed_mean[picked]).sum() / weights[picked].sum())
    assert (fast.low, fast.high) == pytest.approx(tuple(np.percentile(loop, [2.5, 97.5])), abs=1e-12)
    assert fast.value == pytest.approx((weights * values.mean(axis=0)).sum() / weights.sum())


def test_sign_flip_p_value_against_the_exact_enumeration():
    values = np.array([0.5, 1.0, -0.25, 1.0, 0.75, 0.25, 1.0, -0.5])
    observed = abs(values.sum())
    exact = np.mean([abs(np.dot(s, values)) >= observed - 1e-12
                     for s in itertools.product([-1, 1], repeat=values.size)])
    assert sign_flip_p_value(values, draws=40_000) == pytest.approx(exact, abs=0.01)
    assert sign_flip_p_value(np.ones(30)) == pytest.approx(2 / 2**30 * 20_000 / 20_001 + 1 / 20_001, abs=1e-4)
    assert sign_flip_p_value([]) == 1.0


def test_gatekeeper_then_holm():
    p = {"primary": 0.01, "b": 0.02, "c": 0.03, "d": 0.5}
    assert gatekeep_holm(p, "primary") == pytest.approx({"primary": 0.01, "b": 0.06, "c": 0.06, "d": 0.5})
    shut = gatekeep_holm({"primary": 0.2, "b": 0.0001}, "primary")
    assert shut == {"primary": 0.2, "b": 1.0}  # nothing is claimed past a primary that failed
    assert gatekeep_holm({"a": 0.01, "b": 0.04}, None) == pytest.approx({"a": 0.02, "b": 0.04})


def test_variance_components_and_minimum_detectable_effect():
    # seed effects ±0.1 and task effects ±0.2 with no interaction: σ²_seed = 0.01·3/2·(2/3)... by hand
    seeds = np.array([-0.1, 0.0, 0.1])
    tasks = np.tile([-0.2, 0.2], 50)
    values = seeds[:, None] + tasks[None, :]
    vc = variance_components(values)
    assert vc["residual"] == pytest.approx(0.0, abs=1e-12)
    assert vc["seed"] == pytest.approx(np.var(seeds, ddof=1))
    assert vc["task"] == pytest.approx(np.var(tasks, ddof=1))
    mde = minimum_detectable_effect(vc, 3, 100)
    assert mde == pytest.approx(2.801585 * np.sqrt(0.01 / 3 + np.var(tasks, ddof=1) / 100), rel=1e-5)
    assert minimum_detectable_effect(vc, 12, 100) < mde
