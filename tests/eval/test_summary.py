"""The evaluation's intervals, floor, write-task pass^1 and PRM-Lite AUROC on constructed records,
checked against values worked out by hand; and the keys eval.json keeps for older readers."""
from __future__ import annotations

import json

import numpy as np
import pytest

from agentgrpo.envs.airline.factory import EnvConfig, SplitConfig
from agentgrpo.eval.evaluator import EpisodeRecord, EvalConfig, evaluate, summarize
from agentgrpo.eval.stats import auroc, bootstrap_auroc
from agentgrpo.eval.tasks import TaskFacts


def rec(task, split, trial, ok, score=None):
    return EpisodeRecord(task, split, "fam_" + task, trial, 1.0 if ok else 0.0, False, [10], "user_stop",
                         user_seed=100 + trial, process_score=score)


def test_two_task_intervals_by_hand():
    # a resample of 2 tasks valued 0 and 1 has mean 0, ½ or 1 with chances ¼, ½, ¼: the 2.5 and 97.5
    # percentiles of 2,000 resamples are 0 and 1
    records = [rec("a", "unseen", 0, True), rec("a", "unseen", 1, True),
               rec("b", "unseen", 0, False), rec("b", "unseen", 1, False)]
    metrics, _ = summarize(records, trials=2, split_sizes={"unseen": 2})
    ci = metrics["ci"]
    assert ci["pass^k"][1] == {"value": 0.5, "low": 0.0, "high": 1.0, "n": 2}
    assert ci["pass^k"][2] == {"value": 0.5, "low": 0.0, "high": 1.0, "n": 2}
    assert ci["pass^1_by_split"]["unseen"] == {"value": 0.5, "low": 0.0, "high": 1.0, "n": 2}


def test_generalization_resamples_within_each_split():
    # uncovered_seen tasks both pass (their mean is 1 in every resample); unseen tasks 0 and 1 give
    # means 0, ½, 1. With sizes 2 and 2: G = (2·1 + 2·m)/4 ∈ {0.5, 0.75, 1}, value 0.75
    records = [rec("u1", "uncovered_seen", 0, True), rec("u2", "uncovered_seen", 0, True),
               rec("v1", "unseen", 0, True), rec("v2", "unseen", 0, False)]
    metrics, _ = summarize(records, trials=1, split_sizes={"uncovered_seen": 2, "unseen": 2})
    assert metrics["generalization"] == 0.75
    assert metrics["ci"]["generalization"] == {"value": 0.75, "low": 0.5, "high": 1.0, "n": 4}
    assert metrics["ci"]["pass^1_by_split"]["uncovered_seen"] == {"value": 1.0, "low": 1.0, "high": 1.0, "n": 2}
    assert metrics["ci"]["pass^1_by_split"]["seen_families"]["value"] == 1.0


def test_floor_and_write_task_pass1_by_hand():
    records = [rec("w1", "covered_seen", 0, True), rec("w1", "covered_seen", 1, False),  # write, 1/2
               rec("w2", "uncovered_seen", 0, False), rec("w2", "uncovered_seen", 1, False),  # write, 0/2
               rec("r", "unseen", 0, True), rec("r", "unseen", 1, True),  # refusal: no write, floor 1
               rec("i", "unseen", 0, False), rec("i", "unseen", 1, True)]  # info: no write, floor 0
    facts = {"w1": TaskFacts(0.0, True), "w2": TaskFacts(0.0, True), "r": TaskFacts(1.0, False),
             "i": TaskFacts(0.0, False)}
    sizes = {"covered_seen": 1, "uncovered_seen": 1, "unseen": 2}
    metrics, per_task = summarize(records, trials=2, split_sizes=sizes, facts=facts)
    assert metrics["write_pass^1"] == 0.25 and metrics["write_tasks"] == 2
    assert metrics["do_nothing_floor"] == 0.25
    assert metrics["do_nothing_floor_by_split"] == {"covered_seen": 0.0, "uncovered_seen": 0.0, "unseen": 0.5,
                                                    "seen_families": 0.0}
    assert metrics["ci"]["write_pass^1"]["value"] == 0.25 and metrics["ci"]["do_nothing_floor"]["n"] == 4
    assert per_task[0] == {"task_id": "w1", "split": "covered_seen", "family": "fam_w1", "successes": [True, False],
                           "trials": [0, 1], "user_seeds": [100, 101], "process_scores": [None, None],
                           "write": True, "do_nothing": 0.0}
    without, _ = summarize(records, trials=2, split_sizes=sizes)
    assert without["write_pass^1"] is None and without["do_nothing_floor"] is None
    assert "write_pass^1" not in without["ci"]


def test_prm_auroc_by_hand():
    # successes score 0.3 and 0.1, failures 0.2 and 0.0: 3 of the 4 (success, failure) pairs are ordered
    records = [rec("a", "unseen", 0, True, 0.3), rec("a", "unseen", 1, False, 0.2),
               rec("b", "unseen", 0, True, 0.1), rec("b", "unseen", 1, False, 0.0), rec("c", "unseen", 0, False)]
    metrics, _ = summarize(records, trials=2, split_sizes={"unseen": 3})
    got = metrics["prm_auroc"]
    assert got["value"] == 0.75 and got["successes"] == 2 and got["failures"] == 2 and got["n"] == 4
    assert got["low"] <= 0.75 <= got["high"]
    ties, _ = summarize([rec("a", "unseen", 0, True, 0.1), rec("b", "unseen", 0, False, 0.1)], 1, {"unseen": 2})
    assert ties["prm_auroc"]["value"] == 0.5
    one_class, _ = summarize([rec("a", "unseen", 0, True, 0.1)], 1, {"unseen": 1})
    assert one_class["prm_auroc"]["value"] is None  # JSON has no NaN
    unscored, _ = summarize([rec("a", "unseen", 0, True)], 1, {"unseen": 1})
    assert unscored["prm_auroc"] is None


def test_bootstrap_auroc_equals_the_loop_over_resampled_tasks():
    rng = np.random.default_rng(1)
    scores = [list(rng.integers(0, 4, size=3) / 4) for _ in range(30)]  # many ties
    labels = [list(rng.random(3) < 0.4) for _ in range(30)]
    fast = bootstrap_auroc(scores, labels, resamples=400, seed=3)
    draws = np.random.default_rng(3).integers(0, 30, size=(400, 30))
    loop = [auroc(np.concatenate([scores[i] for i in d]), np.concatenate([labels[i] for i in d])) for d in draws]
    loop = np.array([v for v in loop if not np.isnan(v)])
    assert fast.value == auroc(np.concatenate(scores), np.concatenate(labels))
    assert (fast.low, fast.high) == pytest.approx(tuple(np.percentile(loop, [2.5, 97.5])), abs=1e-12)


def test_eval_json_keeps_the_old_keys_and_adds_intervals(tmp_path):
    env = EnvConfig(n_tasks=12, splits=SplitConfig(covered_seen=4, uncovered_seen=4, unseen=4))
    evaluate(EvalConfig(policy="oracle", env=env, trials=2, out_dir=str(tmp_path), progress=False))
    saved = json.loads((tmp_path / "eval.json").read_text())
    m = saved["metrics"]
    old = {"pass^k", "pass@k", "pass^k_tasks", "pass^1_by_split", "pass^1_by_family", "generalization",
           "error_rate", "reasoning_depth_p50", "episodes", "aborted", "tasks"}
    assert old <= set(m) and m["pass^k"]["1"] == 1.0
    assert set(m["ci"]) == {"pass^k", "pass@k", "pass^1_by_split", "generalization", "write_pass^1",
                            "do_nothing_floor", "tau_bench_pass^k", "family_pass^1", "tau_bench_pass^1",
                            "no_write_pass^1"}
    assert m["family_pass^1"] == m["tau_bench_pass^1"] == m["no_write_pass^1"] == 1.0 and m["cut_off"] == 0
    assert m["tau_bench_pass^k"] == {"1": 1.0, "2": 1.0}  # nothing aborted: τ-bench's count is ours
    assert m["ci"]["pass^k"]["2"] == {"value": 1.0, "low": 1.0, "high": 1.0, "n": 12}
    assert m["prm_auroc"]["failures"] == 0 and m["prm_auroc"]["value"] is None  # the oracle never fails
    row = saved["per_task"][0]
    assert row["trials"] == [0, 1] and len(row["user_seeds"]) == 2 and all(isinstance(s, float)
                                                                           for s in row["process_scores"])
    assert saved["seed"] == 0 and saved["task_set"] == {"source": "env", "env_seed": 0, "env_source": "generated"}
    md = (tmp_path / "eval.md").read_text()
    assert "| pass^1 | 1.000 | [1.000, 1.000] |" in md and "do-nothing floor" in md
