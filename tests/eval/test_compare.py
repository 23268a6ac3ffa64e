"""Paired comparison of two evaluations: differences and intervals worked out by hand, refusals of
evaluations that do not pair, and the real evaluator's outputs."""
from __future__ import annotations

import copy
import json

import pytest

from agentgrpo.envs.airline.factory import EnvConfig, SplitConfig
from agentgrpo.eval.compare import PairingError, compare_evals
from agentgrpo.eval.evaluator import EvalConfig, evaluate
from agentgrpo.eval.stats import Estimate

SIZES = {"covered_seen": 1, "uncovered_seen": 1, "unseen": 2}
TASKS = [("c", "covered_seen", True), ("u", "uncovered_seen", False), ("v1", "unseen", True), ("v2", "unseen", False)]
"""(task, split, needs a write)."""


def eval_json(successes: dict[str, list[bool]], seed: int = 0) -> dict:
    return {"policy": "x", "trials": 2, "seed": seed, "split_sizes": dict(SIZES),
            "per_task": [{"task_id": t, "split": s, "family": "f", "successes": successes[t], "trials": [0, 1],
                          "user_seeds": [seed * 1000 + i * 10, seed * 1000 + i * 10 + 1], "write": w,
                          "do_nothing": 0.0 if w else 1.0}
                         for i, (t, s, w) in enumerate(TASKS)]}


A = eval_json({"c": [True, True], "u": [True, False], "v1": [False, False], "v2": [True, True]})
B = eval_json({"c": [False, False], "u": [True, False], "v1": [False, False], "v2": [False, True]})


def test_paired_differences_by_hand():
    diff = compare_evals(A, B, names=("A", "B"))
    # per-task pass^1 differences: c +1, u 0, v1 0, v2 +0.5
    assert diff.overall.value == pytest.approx(1.5 / 4) and diff.tasks == 4 and diff.trials == 2
    assert diff.by_split["covered_seen"] == Estimate(1.0, 1.0, 1.0, 1)
    assert diff.by_split["uncovered_seen"] == Estimate(0.0, 0.0, 0.0, 1)
    assert diff.by_split["seen_families"].value == 0.5
    # unseen: differences 0 and ½; a resample's mean is 0, ¼ or ½ (chances ¼, ½, ¼)
    assert diff.by_split["unseen"] == Estimate(0.25, 0.0, 0.5, 2)
    # write tasks c and v1: differences 1 and 0, resampled means 0, ½, 1
    assert diff.write == Estimate(0.5, 0.0, 1.0, 2)
    # Generalization (1·u + 2·v)/3 with u's difference fixed at 0: (2/3)·{0, ¼, ½}
    assert diff.generalization.value == pytest.approx(1 / 6)
    assert (diff.generalization.low, diff.generalization.high) == pytest.approx((0.0, 1 / 3))
    # no-write tasks u and v2: differences 0 and ½; one family: family-balanced is overall
    assert diff.figures["no_write"] == Estimate(0.25, 0.0, 0.5, 2)
    assert diff.figures["family"].value == pytest.approx(diff.overall.value)
    # τ-bench's mix without an output task: write 30/49 × ½ + no change 19/49 × ¼
    assert diff.figures["tau_bench"].value == pytest.approx((30 * 0.5 + 19 * 0.25) / 49)
    assert set(diff.to_dict()["difference"]) == {"overall", "family", "tau_bench", "write", "no_write",
                                                 "generalization", "split/covered_seen", "split/uncovered_seen",
                                                 "split/unseen", "split/seen_families"}
    assert "| covered_seen | +1.000 [+1.000, +1.000] | interval excludes 0 |" in diff.to_markdown()


def test_a_comparison_with_itself_is_zero():
    same = compare_evals(A, copy.deepcopy(A))
    assert all(e == Estimate(0.0, 0.0, 0.0, e.n) for e in same.estimates().values())


@pytest.mark.parametrize("change, message", [
    (lambda r: r["per_task"].pop(), "the tasks differ"),
    (lambda r: r.update(trials=3), "trial"),
    (lambda r: r.update(seed=1), "seed"),
    (lambda r: r["per_task"][1].update(user_seeds=[7, 8]), "user seeds"),
    (lambda r: r["per_task"][2].update(trials=[0], successes=[False], user_seeds=[20]), "--resume"),
    (lambda r: r["per_task"][0].update(split="unseen"), "is in"),
    (lambda r: [row.pop("user_seeds") for row in r["per_task"]], "without per-task user seeds"),
])
def test_evaluations_that_do_not_pair_are_refused(change, message):
    other = copy.deepcopy(B)
    change(other)
    with pytest.raises(PairingError, match=message):
        compare_evals(A, other)


def test_real_evaluations_pair_and_another_seed_does_not(tmp_path):
    env = EnvConfig(n_tasks=12, splits=SplitConfig(covered_seen=4, uncovered_seen=4, unseen=4))
    runs = {}
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        config = EvalConfig(policy="oracle", env=env, trials=2, seed=seed, out_dir=str(tmp_path / name),
                            progress=False)
        runs[name] = evaluate(config)
    diff = compare_evals(tmp_path / "a", runs["b"])  # an out_dir and an EvalReport
    assert diff.overall == Estimate(0.0, 0.0, 0.0, 12) and diff.generalization.value == 0.0
    with pytest.raises(PairingError, match="seed"):
        compare_evals(runs["a"], tmp_path / "c" / "eval.json")
    with pytest.raises(FileNotFoundError, match="agentgrpo eval"):
        compare_evals(tmp_path / "missing", runs["a"])


def test_eval_cli_compares_to_an_earlier_evaluation(tmp_path, capsys):
    from helpers import SMALL_ENV_OVERRIDES

    from agentgrpo.cli import main

    settings = ["--policy", "oracle", *SMALL_ENV_OVERRIDES, "trials=1", "progress=false"]
    assert main(["eval", *settings, "--out", str(tmp_path / "a")]) == 0
    assert main(["eval", *settings, "--out", str(tmp_path / "b"), "--compare-to", str(tmp_path / "a")]) == 0
    saved = json.loads((tmp_path / "b" / "compare.json").read_text())
    assert saved["difference"]["overall"] == {"value": 0.0, "low": 0.0, "high": 0.0, "n": 12}
    assert "Paired difference" in (tmp_path / "b" / "compare.md").read_text()
    assert main(["eval", *settings, "seed=3", "--out", str(tmp_path / "c"), "--compare-to", str(tmp_path / "a")]) == 2
    assert "not paired" in capsys.readouterr().err
    assert main(["eval", *settings, "--out", str(tmp_path / "d"), "--compare-to", str(tmp_path / "none")]) == 2
    assert not (tmp_path / "d").exists()  # refused before any episode
