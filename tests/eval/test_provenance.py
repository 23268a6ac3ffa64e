"""An evaluation says what it ran, refuses to overwrite one, selects tasks, and counts aborts both ways."""
from __future__ import annotations

import json
import re
import subprocess
from datetime import datetime

import pytest
from helpers import SMALL_ENV_OVERRIDES

from agentgrpo.cli import main
from agentgrpo.eval.evaluator import EpisodeRecord, EvalConfig, evaluate
from agentgrpo.eval.provenance import git_commit, policy_description, user_description
from agentgrpo.eval.summary import summarize

SMALL = [*SMALL_ENV_OVERRIDES, "trials=2", "progress=false"]


def test_eval_json_records_what_ran(tmp_path):
    out = tmp_path / "eval"
    assert main(["eval", "--policy", "oracle", *SMALL, "--out", str(out)]) == 0
    p = json.loads((out / "eval.json").read_text())["provenance"]
    assert p["policy"] == {"kind": "oracle"} and p["user"] == {"kind": "scripted"}
    assert p["agentgrpo_version"] == p["packages"]["agentgrpo"]
    assert p["packages"]["torch"] and p["packages"]["transformers"]
    assert datetime.fromisoformat(p["date"]).utcoffset().total_seconds() == 0
    assert p["config"]["trials"] == 2 and p["config"]["env"]["n_tasks"] == 12 and p["config"]["out_dir"] == str(out)
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert p["git_commit"] is None or re.fullmatch(r"[0-9a-f]{40}(-dirty)?", p["git_commit"])
    if head:  # the tests run from the checkout
        assert p["git_commit"].split("-")[0] == head


def test_git_commit_is_none_outside_a_checkout(tmp_path):
    assert git_commit(tmp_path) is None


def test_an_endpoint_policy_and_an_llm_user_are_named():
    config = EvalConfig(policy="openai")
    config.endpoint.model, config.endpoint.base_url = "Qwen/Qwen2.5-7B-Instruct", "http://10.0.0.2:8000/v1"
    config.env.user.kind, config.env.user.model = "llm", "gpt-4o"
    assert policy_description(config) == {"kind": "openai", "model": "Qwen/Qwen2.5-7B-Instruct",
                                          "base_url": "http://10.0.0.2:8000/v1"}
    assert user_description(config) == {"kind": "llm", "model": "gpt-4o", "base_url": config.env.user.base_url,
                                        "temperature": 0.0}
    hub = EvalConfig(policy="HuggingFaceTB/SmolLM2-135M-Instruct")
    assert policy_description(hub) == {"kind": "checkpoint", "path": None,
                                       "hub_id": "HuggingFaceTB/SmolLM2-135M-Instruct"}


def test_an_existing_out_dir_is_refused_unless_resumed_or_forced(tmp_path, capsys, monkeypatch):
    out = tmp_path / "eval"
    argv = ["eval", "--policy", "oracle", *SMALL, "--out", str(out)]
    assert main(argv) == 0
    first = (out / "eval.json").read_text()
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(out) in err[0] and "--resume" in err[0] and "--force" in err[0]
    assert (out / "eval.json").read_text() == first  # nothing touched
    (out / "compare.md").write_text("stale")
    assert main([*argv, "--force"]) == 0 and not (out / "compare.md").exists()
    assert main([*argv, "--resume"]) == 0
    assert json.loads((out / "eval.json").read_text())["resumed"] == 24
    monkeypatch.chdir(tmp_path)  # the default out_dir, runs/eval, is refused like any other
    assert main(["eval", "--policy", "oracle", *SMALL]) == 0 and (tmp_path / "runs/eval/eval.json").is_file()
    assert main(["eval", "--policy", "oracle", *SMALL]) == 2
    assert "runs/eval already exists" in capsys.readouterr().err
    with pytest.raises(Exception, match="already exists"):  # the library call too
        evaluate(EvalConfig(policy="oracle", out_dir=str(out)))


def test_task_ids_select_tasks_with_the_user_seeds_of_the_full_run(tmp_path):
    full, part = tmp_path / "full", tmp_path / "part"
    assert main(["eval", "--policy", "oracle", *SMALL, "--out", str(full)]) == 0
    rows = json.loads((full / "eval.json").read_text())["per_task"]
    chosen = [rows[5]["task_id"], rows[1]["task_id"]]
    assert main(["eval", "--policy", "oracle", *SMALL, "--out", str(part), f"task_ids=[{','.join(chosen)}]"]) == 0
    report = json.loads((part / "eval.json").read_text())
    assert [r["task_id"] for r in report["per_task"]] == [rows[1]["task_id"], rows[5]["task_id"]]
    assert report["per_task"][0]["user_seeds"] == rows[1]["user_seeds"]
    assert report["task_set"]["task_ids"] == chosen and report["metrics"]["episodes"] == 4
    assert main(["eval", "--policy", "oracle", *SMALL, "--out", str(tmp_path / "x"), "task_ids=[nope]"]) == 2


def test_tau_bench_count_takes_aborted_episodes_as_failures_by_hand():
    def rec(task, trial, ok, aborted=False):
        return EpisodeRecord(task, "unseen", "fam", trial, 1.0 if ok else 0.0, False, [10], "user_stop",
                             aborted=aborted)

    # task a: 2 successes + 1 aborted; task b: 1 success, 2 failures
    records = [rec("a", 0, True), rec("a", 1, True), rec("a", 2, False, aborted=True),
               rec("b", 0, True), rec("b", 1, False), rec("b", 2, False)]
    metrics, _ = summarize(records, 3, {"unseen": 2})
    assert metrics["pass^k"][1] == pytest.approx((1.0 + 1 / 3) / 2)  # ours: the abort left out of a
    assert metrics["tau_bench_pass^k"] == pytest.approx({1: (2 / 3 + 1 / 3) / 2, 2: (1 / 3 + 0) / 2, 3: 0.0})
    assert metrics["ci"]["tau_bench_pass^k"][1]["n"] == 2
