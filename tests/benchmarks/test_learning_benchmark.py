"""The learning benchmark's seed-aware report: per-seed runs, pool pass^1 with seeds random,
each family before / after, group shares averaged over seeds (hand-computed values)."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from agentgrpo.config import load_config
from agentgrpo.eval.config import EvalConfig

from . import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "learning.py"


@pytest.fixture(scope="module")
def learning():
    return load_script("learning")


def _report(successes: dict[str, int], trials: int = 4) -> dict:
    """An eval.json with one row per task: split/family/write from the task id, ``successes`` of
    ``trials`` (pass^1 = successes / trials)."""
    rows = []
    for task_id, s in successes.items():
        split, family, kind = task_id.split(":")
        rows.append({"task_id": task_id, "split": split, "family": family, "write": kind == "w",
                     "do_nothing": 0.0 if kind == "w" else 1.0, "trials": trials,
                     "successes": [True] * s + [False] * (trials - s),
                     "user_seeds": list(range(trials))})
    return {"per_task": rows, "trials": trials, "seed": 7001}


TASKS = ["a:cancel:w", "a:refuse:n", "b:cancel:w", "b:info:n"]


def test_run_names_keep_the_one_seed_layout(learning):
    assert learning.run_name("joint", 0) == "joint"
    assert learning.run_name("joint", 2) == "joint-seed2"


def test_seeds_are_distinct_non_negative_integers(learning):
    import argparse

    assert learning.seed_list("0, 1,2") == [0, 1, 2]
    for bad in ("x", "", "0,0", "-1"):
        with pytest.raises(argparse.ArgumentTypeError, match="distinct non-negative integers"):
            learning.seed_list(bad)


def test_pool_pass1_averages_seeds_and_lists_each(learning):
    reports = {0: _report(dict(zip(TASKS, [4, 4, 0, 2]))), 1: _report(dict(zip(TASKS, [0, 4, 0, 2])))}
    pool = learning.pool_pass1(reports)
    assert pool["per_seed"] == {"0": pytest.approx(10 / 16), "1": pytest.approx(6 / 16)}
    assert pool["value"] == pytest.approx(8 / 16)
    assert pool["low"] <= pool["value"] <= pool["high"] and pool["n"] == 4


def test_family_pass1_reads_before_and_the_seed_mean_after(learning):
    before = _report(dict(zip(TASKS, [2, 4, 0, 2])))
    after = {0: _report(dict(zip(TASKS, [4, 4, 0, 4]))), 1: _report(dict(zip(TASKS, [0, 4, 2, 4])))}
    families = learning.family_pass1(after, before)
    assert families["a/cancel"] == {"before": 0.5, "after": 0.5, "write": True, "tasks": 1}
    assert families["b/cancel"]["after"] == pytest.approx(0.25)
    assert families["b/info"] == {"before": 0.5, "after": 1.0, "write": False, "tasks": 1}


def test_group_shares_average_the_seeds_that_reached_a_step(learning):
    seed0 = [{"step": 1, "rollout/informative_group_frac": 0.5, "rollout/informative_groups": 2.0,
              "rollout/generation_rounds": 2.0, "reward/outcome_mean": 0.25},
             {"step": 2, "rollout/informative_group_frac": 0.25, "rollout/informative_groups": 1.0,
              "rollout/generation_rounds": 1.0, "reward/outcome_mean": 0.5}]
    seed1 = [{"step": 1, "rollout/informative_group_frac": 0.0, "rollout/informative_groups": 0.0,
              "rollout/generation_rounds": 2.0, "reward/outcome_mean": 0.75}]
    shares = learning.group_shares([seed0, seed1], tasks_per_step=4)
    assert [r["step"] for r in shares] == [1, 2]
    assert shares[0] == {"step": 1, "sampled": 0.25, "trained": 0.25, "rounds": 2.0, "outcome_mean": 0.5}
    assert shares[1]["trained"] == 0.25 and shares[1]["sampled"] == 0.25  # seed 0 alone


def test_markdown_prints_every_headline_figure_with_its_per_seed_values(learning):
    from agentgrpo.eval.grid import seed_aware_delta

    before = _report(dict(zip(TASKS, [2, 4, 0, 2])))
    after = {0: _report(dict(zip(TASKS, [4, 4, 0, 2]))), 3: _report(dict(zip(TASKS, [2, 4, 2, 2])))}
    delta = seed_aware_delta(after, {0: before}, {0: 0, 3: 0})
    # write tasks: seed 0 +0.5 on one of two, seed 3 +0.5 on the other: +0.25 each
    assert delta["figures"]["write"]["per_seed"] == {0: pytest.approx(0.25), 3: pytest.approx(0.25)}
    results = {"pool_splits": ["a", "b"], "trials": 4, "temperature": 0.7, "eval_seed": 7001, "seeds": [0, 3],
               "before": {"value": 0.5, "low": 0.25, "high": 0.75},
               "experiments": {"joint": {"checks": [20], "curve": {"20": learning.pool_pass1(after)},
                                         "after_minus_before": delta["figures"],
                                         "families": learning.family_pass1(after, before)}}}
    text = learning.markdown(results)
    assert "GRPO seeds 0, 3" in text
    assert "| joint | write-task pass^1 | +0.250 [" in text and "| +0.250, +0.250 |" in text
    assert "| joint | no-write pass^1 | +0.000 [+0.000, +0.000] | +0.000, +0.000 |" in text
    assert "| a/cancel (w) | 0.50 | 0.75 |" in text


def test_every_pool_evaluation_decodes_with_the_rollout_settings_of_training(learning):
    settings = ["trainer.lr=1e-4", "rollout.temperature=0.7", "algo.kl_coef=0.05",
                "rollout.constrain_tool_calls=true", "rollout.copy_arguments=true"]
    assert learning.decoding_settings(settings) == [
        "rollout.temperature=0.7", "rollout.constrain_tool_calls=true", "rollout.copy_arguments=true"]


def test_a_kept_evaluation_that_decoded_otherwise_is_refused_not_reused(learning, tmp_path):
    """An evaluation kept from an earlier invocation under other rollout settings is not paired
    with this one: the benchmark stops naming the setting instead of reusing it."""
    free = learning.decoding_settings(learning.LEARNING_SETTINGS)
    ran = load_config(EvalConfig, ["policy.init=x", *free], defaults="eval.yaml").rollout
    report = {**_report({"a:cancel:w": 2}), "provenance": {"config": {"rollout": asdict(ran)}}}
    (tmp_path / "eval.json").write_text(json.dumps(report))
    assert learning.evaluate_pool(Path("x"), tmp_path, 4, free)["per_task"][0]["task_id"] == "a:cancel:w"
    with pytest.raises(SystemExit, match=r"rollout\.constrain_tool_calls=False \(now True\)"):
        learning.evaluate_pool(Path("x"), tmp_path, 4, [*free, "rollout.constrain_tool_calls=true"])


def test_a_bad_override_is_reported_in_one_line(tmp_path):
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "learning.py"
    result = subprocess.run([sys.executable, str(script), "--out", str(tmp_path), "--sft", str(tmp_path),
                             "--experiments", "", "rollout.copy_by_kind=true"], capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "learning.py: rollout.copy_by_kind=True is invalid: needs rollout.copy_arguments=true "
        "(it narrows the words an argument copies)"]
