"""τ-bench results files in and out: export, score (τ-bench's pass^k), compare, regrade, bad files."""
from __future__ import annotations

import copy
import json
from math import comb
from pathlib import Path

import pytest

from agentgrpo.cli import main
from agentgrpo.eval.tau_bench_io import read_results, replay
from agentgrpo.eval.tau_bench_score import regrade_results, score_results, task_source, tau_bench_pass_hat_k

GIVE_UP = "I am sorry, I cannot help with that request."


def tau_bench_formula(records: list[dict]) -> dict[int, float]:
    """τ-bench's display_metrics, written out: n = distinct trials, c = successes per task."""
    n = len({r["trial"] for r in records})
    c: dict = {}
    for r in records:
        c[r["task_id"]] = c.get(r["task_id"], 0) + (abs(r["reward"] - 1) <= 1e-6)
    return {k: sum(comb(ci, k) / comb(n, k) for ci in c.values()) / len(c) for k in range(1, n + 1)}


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory) -> Path:
    """The oracle on the default 50 tasks × 3 trials, exported by `eval --format tau-bench` (150 records)."""
    out = tmp_path_factory.mktemp("tau") / "oracle"
    assert main(["eval", "--policy", "oracle", "trials=3", "progress=false", "--out", str(out),
                 "--format", "tau-bench"]) == 0
    return out


@pytest.fixture(scope="module")
def mixed_file(oracle_run) -> Path:
    """The oracle's records with a third replaced by an agent that gives up at once (reward: the
    task's do-nothing reward from eval.json, which the grader gives an empty episode)."""
    records = json.loads((oracle_run / "tau_bench_results.json").read_text())
    rows = json.loads((oracle_run / "eval.json").read_text())["per_task"]
    floor = {row["task_id"]: row["do_nothing"] for row in rows}
    for r in records:
        if (r["task_id"] + r["trial"]) % 3 == 0:
            ours = r["info"]["agentgrpo"]
            r["traj"] = [*r["traj"][:2], {"role": "assistant", "content": GIVE_UP}]
            r["reward"] = floor[ours["task_id"]]
            ours["process_score"] = None
            del r["info"]["reward_info"]
    path = oracle_run.parent / "mixed.json"
    path.write_text(json.dumps(records))
    return path


def score_json(capsys, *argv: str) -> dict:
    assert main(["tau-bench", "score", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_export_is_tau_bench_shaped(oracle_run):
    records = json.loads((oracle_run / "tau_bench_results.json").read_text())
    assert len(records) == 150
    first = records[0]
    assert set(first) == {"task_id", "reward", "info", "traj", "trial"}
    assert isinstance(first["task_id"], int) and first["reward"] == 1.0
    assert set(first["info"]["task"]) == {"user_id", "actions", "instruction", "outputs"}
    assert first["info"]["reward_info"]["reward"] == 1.0
    assert [m["role"] for m in first["traj"][:2]] == ["system", "user"]
    calls = [m for m in first["traj"] if m.get("tool_calls")]
    assert calls and json.loads(calls[0]["tool_calls"][0]["function"]["arguments"]) is not None
    assert sorted({(r["task_id"], r["trial"]) for r in records}) == [(t, k) for t in range(50) for k in range(3)]


def test_score_equals_tau_bench_formula(mixed_file, capsys):
    records = json.loads(mixed_file.read_text())
    expected = tau_bench_formula(records)
    assert 0.3 < expected[1] < 0.9  # a mixed run: neither all solved nor all failed
    report = score_json(capsys, str(mixed_file))
    assert report["records"] == 150 and report["tasks"] == 50 and report["trials"] == 3
    for k in (1, 2, 3):
        est = report[f"pass^{k}"]
        assert est["value"] == pytest.approx(expected[k], abs=1e-12)
        assert est["low"] <= est["value"] <= est["high"] and est["n"] == 50
        assert report["pass^k_finished"][f"pass^{k}"]["value"] == pytest.approx(expected[k])  # nothing aborted
    # the oracle's half solves everything; the give-up records solve exactly the do-nothing tasks
    floor = report["do_nothing_floor"]["value"]
    assert floor == pytest.approx(0.3) and report["write_tasks"] == 29
    assert set(report["pass^1_by_split"]) == {"covered_seen", "uncovered_seen", "unseen"}
    assert report["pass@3"]["value"] == 1.0  # every task has an oracle trial
    auroc = report["prm_auroc"]
    assert auroc["successes"] + auroc["failures"] == 150 and 0 <= auroc["value"] <= 1
    assert report["process_score"]["n"] == 50


def test_score_by_hand_on_a_tiny_file(tmp_path):
    """3 tasks × 4 trials with c = 4, 2, 0: pass^1 = (1 + 2/4 + 0)/3, pass^2 = (1 + 1/6 + 0)/3, pass^4 = 1/3."""
    records = [{"task_id": t, "trial": k, "reward": float(k < c), "info": {}, "traj": []}
               for t, c in enumerate([4, 2, 0]) for k in range(4)]
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(records))
    results = read_results(path)
    assert tau_bench_pass_hat_k(results) == pytest.approx({1: 0.5, 2: 7 / 18, 3: 1 / 3, 4: 1 / 3})
    figures, _ = score_results(results)
    assert figures["pass^2"]["value"] == pytest.approx(7 / 18) and figures["write_pass^1"] is None


def test_regrade_agrees_on_our_exports_and_finds_a_wrong_reward(mixed_file, tmp_path, capsys):
    report = score_json(capsys, str(mixed_file), "--regrade")
    assert report["regrade"]["agree"] == 150 and report["regrade"]["disagree"] == 0
    records = json.loads(mixed_file.read_text())
    wrong = next(r for r in records if r["reward"] == 1.0 and r["info"]["task"]["actions"])
    wrong["reward"] = 0.0
    path = tmp_path / "wrong.json"
    path.write_text(json.dumps(records))
    regrade = score_json(capsys, str(path), "--regrade")["regrade"]
    assert regrade["agree"] == 149 and regrade["disagree"] == 1 and regrade["task_ids"] == [wrong["task_id"]]
    assert regrade["disagreements"][0]["regraded"] == 1.0


def test_replay_runs_only_the_first_call_and_skips_malformed_turns(oracle_run):
    results = read_results(oracle_run / "tau_bench_results.json")
    tasks = task_source(results)
    write = next(r for r in results if tasks[r.key].task.actions and any(
        m.get("tool_calls") and m["tool_calls"][0]["function"]["name"].startswith(("book", "cancel", "update"))
        for m in r.traj))
    task = tasks[write.key]
    assert replay(task.bundle.domain, task.task, write.traj).reward == 1.0
    broken = copy.deepcopy(write.traj)
    for m in broken:  # the write call's arguments unparsable: the turn never ran
        if m.get("tool_calls") and m["tool_calls"][0]["function"]["name"].startswith(("book", "cancel", "update")):
            m["tool_calls"][0]["function"]["arguments"] = "{not json"
    assert not replay(task.bundle.domain, task.task, broken).db_match


def test_compare_gives_the_paired_difference(oracle_run, mixed_file, capsys):
    report = score_json(capsys, str(oracle_run / "tau_bench_results.json"), "--compare", str(mixed_file))
    records = json.loads(mixed_file.read_text())
    by_hand = 1.0 - tau_bench_formula(records)[1]  # the oracle solves every trial
    diff = report["compare"]
    assert diff["tasks"] == 50 and diff["user_seeds_checked"] is True
    assert diff["difference"]["overall"]["value"] == pytest.approx(by_hand)
    assert diff["difference"]["overall"]["low"] > 0


def test_a_file_as_tau_bench_documents_it_parses(tmp_path, capsys):
    """Records as τ-bench's run.py writes them: int task ids, litellm-style messages (content null
    beside tool_calls), info with task / source / user_cost / reward_info, and a crashed episode."""
    system = {"role": "system", "content": "# Airline Agent Policy\n..."}
    call = {"content": None, "role": "assistant", "tool_calls": [{
        "function": {"arguments": "{\"user_id\":\"mia_li_3668\"}", "name": "get_user_details"},
        "id": "call_a1", "type": "function"}]}
    tool = {"role": "tool", "tool_call_id": "call_a1", "name": "get_user_details", "content": "{\"name\": {}}"}
    reply = {"content": "Your reservation is cancelled.", "role": "assistant"}

    def record(task_id: int, trial: int, reward: float) -> dict:
        task = {"user_id": "mia_li_3668", "actions": [], "instruction": "You are Mia.", "outputs": []}
        info = {"task": task, "source": "user", "user_cost": 0.003,
                "reward_info": {"reward": reward, "info": {"r_actions": reward, "gt_data_hash": "ab" * 32},
                                "actions": []}}
        traj = [system, {"role": "user", "content": "Hi"}, call, tool, reply, {"role": "user", "content": "###STOP###"}]
        return {"task_id": task_id, "reward": reward, "info": info, "traj": traj, "trial": trial}

    records = [record(0, 0, 1.0), record(0, 1, 0.0), record(1, 0, 1.0),
               {"task_id": 1, "reward": 0.0, "info": {"error": "RateLimitError", "traceback": "..."}, "traj": [],
                "trial": 1}]
    path = tmp_path / "tool-calling-gpt-4o-0.0_range_0--1_user-gpt-4o-llm_1201.json"
    path.write_text(json.dumps(records, indent=2))
    report = score_json(capsys, str(path))
    assert report["aborted"] == 1 and report["tasks"] == 2 and report["trials"] == 2
    assert report["pass^1"]["value"] == pytest.approx(0.5)  # τ-bench: the crash is a failure
    assert report["pass^k_finished"]["pass^1"]["value"] == pytest.approx(0.75)  # ours: (1/2 + 1/1) / 2
    assert report["pass^1_by_split"]["all"]["value"] == pytest.approx(0.5) and report["do_nothing_floor"] is None


@pytest.mark.parametrize("content, message", [
    ("{not json", "not a JSON file"),
    ("{}", "non-empty JSON list"),
    ("[]", "an empty list"),
    ('[{"task_id": 0, "trial": 0}]', "record 0: missing reward"),
    ('[{"task_id": 0, "trial": 0, "reward": "1"}]', "reward must be a finite number"),
    ('[{"task_id": 0, "trial": -1, "reward": 1}]', "trial must be an integer >= 0"),
    ('[{"task_id": 0, "trial": 0, "reward": 1, "traj": "hello"}]', "traj must be a list of chat messages"),
    ('[{"task_id": 0, "trial": 0, "reward": 1}, {"task_id": 0, "trial": 0, "reward": 0}]', "both task 0 trial 0"),
])
def test_a_malformed_file_is_one_line(content, message, tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text(content)
    assert main(["tau-bench", "score", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("agentgrpo: ") and str(path) in err[0] and message in err[0]


def test_missing_file_and_regrade_without_tasks_are_one_line(tmp_path, capsys):
    assert main(["tau-bench", "score", str(tmp_path / "none.json")]) == 2
    path = tmp_path / "plain.json"
    path.write_text(json.dumps([{"task_id": 0, "trial": 0, "reward": 1.0, "info": {}, "traj": []}]))
    assert main(["tau-bench", "score", str(path), "--regrade"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "no such results file" in err[0] and "--data-dir" in err[1]


def test_regrade_of_tau_bench_gold_actions_agrees(tau_bench_dir, tmp_path, capsys):
    """Each of τ-bench's 50 airline tasks played by its gold actions (then its outputs said): our
    environment grades every one 1.0, and a record claiming 0 for one of them is caught."""
    tasks = json.loads((tau_bench_dir / "tasks_test.json").read_text())
    records = []
    for i, task in enumerate(tasks):
        traj = [{"role": "system", "content": "policy"}, {"role": "user", "content": task["instruction"][:40]}]
        for k, action in enumerate(a for a in task["actions"] if a["name"] != "respond"):
            call_id = f"call_{k}"
            traj += [{"content": None, "role": "assistant", "tool_calls": [{"id": call_id, "type": "function",
                      "function": {"name": action["name"], "arguments": json.dumps(action["kwargs"])}}]},
                     {"role": "tool", "tool_call_id": call_id, "name": action["name"], "content": "..."}]
        traj += [{"role": "assistant", "content": " ".join(task.get("outputs", [])) or "Done."},
                 {"role": "user", "content": "###STOP###"}]
        records.append({"task_id": i, "reward": 1.0, "info": {}, "traj": traj, "trial": 0})
    records[7]["reward"] = 0.0
    path = tmp_path / "gold.json"
    path.write_text(json.dumps(records))
    report = score_json(capsys, str(path), "--regrade", "--data-dir", str(tau_bench_dir))
    assert report["regrade"]["agree"] == 49 and report["regrade"]["task_ids"] == [7]
    assert report["do_nothing_floor"]["value"] == pytest.approx(0.38)  # 19 of 50 (docs/evaluation.md)
    assert set(report["pass^1_by_split"]) == {"covered_seen", "uncovered_seen", "unseen"}


def test_regrade_results_needs_tasks():
    from agentgrpo.config import DataError

    with pytest.raises(DataError, match="--data-dir"):
        regrade_results([], None)


def test_export_command_and_aborted_episodes(oracle_run, tmp_path, capsys):
    """`tau-bench export` writes what `eval --format tau-bench` wrote; an aborted episode becomes
    τ-bench's crash record (reward 0, info.error), which score counts as a failure and as aborted."""
    from agentgrpo.eval.evaluator import EpisodeRecord
    from agentgrpo.eval.tasks import eval_tasks
    from agentgrpo.eval.tau_bench_io import eval_config_from, tau_bench_results

    target = tmp_path / "again.json"
    assert main(["tau-bench", "export", str(oracle_run), "--out", str(target)]) == 0
    assert json.loads(target.read_text()) == json.loads((oracle_run / "tau_bench_results.json").read_text())
    config = eval_config_from({"trials": 2})
    tasks = eval_tasks(config)
    task = tasks[3].task
    aborted = EpisodeRecord(task.task_id, tasks[3].split, task.family, 1, float("nan"), False, [], "aborted",
                            aborted=True, error="endpoint failed after 6 attempts")
    [record] = tau_bench_results([aborted], tasks, config)
    assert record["task_id"] == 3 and record["reward"] == 0.0 and record["trial"] == 1
    assert record["info"]["error"] == "endpoint failed after 6 attempts" and "reward_info" not in record["info"]
    path = tmp_path / "one.json"
    path.write_text(json.dumps([record]))
    capsys.readouterr()
    report = score_json(capsys, str(path))
    assert report["aborted"] == 1 and report["pass^1"]["value"] == 0.0


def test_help_of_every_tau_bench_command():
    for argv in (["tau-bench", "--help"], ["tau-bench", "score", "--help"], ["tau-bench", "export", "--help"]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 0


def test_regrade_scores_an_episode_cut_at_the_step_limit_0(tau_bench_dir, tmp_path, capsys):
    """τ-bench records an episode its loop cut off (no ###STOP###, no transfer) with reward 0 and no
    grade, even when the database it left is right. The regrade plays the same gold calls: with the
    user's stop it grades 1, without it (cut off) 0, so both records agree."""
    tasks = json.loads((tau_bench_dir / "tasks_test.json").read_text())
    task = next(t for t in tasks if any(a["name"] not in ("respond", "transfer_to_human_agents")
                                        for a in t["actions"]) and not t.get("outputs"))
    index = tasks.index(task)
    traj = [{"role": "system", "content": "policy"}, {"role": "user", "content": task["instruction"][:40]}]
    for k, action in enumerate(a for a in task["actions"] if a["name"] != "respond"):
        traj += [{"content": None, "role": "assistant", "tool_calls": [{"id": f"call_{k}", "type": "function",
                  "function": {"name": action["name"], "arguments": json.dumps(action["kwargs"])}}]},
                 {"role": "tool", "tool_call_id": f"call_{k}", "name": action["name"], "content": "..."}]
    finished = traj + [{"role": "assistant", "content": "Done."}, {"role": "user", "content": "###STOP###"}]
    cut = traj + [{"role": "assistant", "content": "Anything else?"}, {"role": "user", "content": "Hm."}]
    records = [{"task_id": index, "reward": 1.0, "info": {"reward_info": {}}, "traj": finished, "trial": 0},
               {"task_id": index, "reward": 0.0, "info": {"reward_info": None}, "traj": cut, "trial": 1}]
    path = tmp_path / "cut.json"
    path.write_text(json.dumps(records))
    regrade = score_json(capsys, str(path), "--regrade", "--data-dir", str(tau_bench_dir))["regrade"]
    assert regrade["agree"] == 2 and regrade["disagree"] == 0
    records[1]["reward"] = 1.0  # a file that graded the cut-off episode at the cap is caught
    path.write_text(json.dumps(records))
    regrade = score_json(capsys, str(path), "--regrade", "--data-dir", str(tau_bench_dir))["regrade"]
    assert regrade["disagree"] == 1 and regrade["disagreements"][0]["regraded"] == 0.0
    assert regrade["disagreements"][0]["db_match"]
