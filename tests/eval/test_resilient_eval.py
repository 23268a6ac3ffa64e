"""Evaluation that survives: failing requests abort their episode only, the run finishes and
counts them, ``--resume`` after a kill plays only the unfinished episodes, and a server that
cannot be reached fails before any episode. Real HTTP against ``tests/flaky_server.py``."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import zlib
from collections import Counter
from pathlib import Path

import pytest
from flaky_server import FlakyServer
from helpers import SMALL_ENV_OVERRIDES

from agentgrpo.cli import main
from agentgrpo.eval.evaluator import EpisodeRecord, summarize

FAILURES = ["stall", "500", "garbage", "close", "truncated", "badstatus", "badutf8", "wrongtype", "429"]
EIGHT_EPISODES = [*SMALL_ENV_OVERRIDES, "splits=[unseen]", "trials=2", "rollout.max_turns=2", "progress=false"]


def doomed(body: dict) -> bool:
    """Every request of these conversations fails (their episode must abort); the others fail once."""
    messages = body.get("messages", [])
    text = "".join(str(m.get("content")) for m in messages[:2])
    return zlib.crc32(text.encode()) % 2 == 0


def failing_plan():
    attempts: Counter = Counter()
    failures: list[str] = []

    def plan(n: int, body: dict) -> str:
        key = json.dumps(body.get("messages"), sort_keys=True)
        attempts[key] += 1
        if not doomed(body) and attempts[key] > 1:
            return "ok"
        failures.append(FAILURES[len(failures) % len(FAILURES)])  # every failure mode in turn
        return failures[-1]

    return plan


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "transcripts.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("role", ["agent", "user"])
def test_failing_requests_abort_their_episode_and_the_run_finishes(role, tmp_path):
    out = tmp_path / "eval"
    with FlakyServer(failing_plan(), stall_s=1.0) as server:
        if role == "agent":  # the evaluated model's server fails
            settings = ["--policy", "openai", f"endpoint.base_url={server.url}", "endpoint.model=flaky",
                        "endpoint.request.timeout=0.5", "endpoint.request.max_retries=1",
                        "endpoint.request.backoff=0.01"]
        else:  # the LLM user's server fails
            settings = ["--policy", "oracle", "env.user.kind=llm", f"env.user.base_url={server.url}",
                        "env.user.model=flaky", "env.user.request.timeout=0.5", "env.user.request.max_retries=1",
                        "env.user.request.backoff=0.01"]
        start = time.perf_counter()
        code = main(["eval", *settings, "--out", str(out), "concurrency=3", *EIGHT_EPISODES])
        seconds = time.perf_counter() - start
    assert code == 0 and seconds < 60
    report = json.loads((out / "eval.json").read_text())
    lines = records(out)
    aborted = [r for r in lines if r["aborted"]]
    assert len(lines) == 8 and report["metrics"]["aborted"] == len(aborted)
    assert 0 < len(aborted) < 8 and report["metrics"]["episodes"] == 8 - len(aborted)
    assert all("failed after 2 attempts" in r["error"] and r["termination"] == "aborted" for r in aborted)
    assert set(server.behaviours) == {"ok", *FAILURES}
    if role == "agent":  # exactly the doomed conversations aborted
        finished = [r for r in lines if not r["aborted"]]
        assert not any(doomed({"messages": r["messages"]}) for r in finished)
    markdown = (out / "eval.md").read_text()
    assert f"{len(aborted)} aborted" in markdown and "aborted episode(s) left out" in markdown


@pytest.mark.slow
def test_resume_after_a_kill_plays_only_the_unfinished_episodes(tmp_path):
    out = tmp_path / "eval"
    argv = ["eval", "--policy", "openai", "endpoint.model=flaky", "--out", str(out), "concurrency=1",
            *EIGHT_EPISODES]
    with FlakyServer(lambda n, body: "slow", stall_s=0.3) as server:
        argv.insert(3, f"endpoint.base_url={server.url}")
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        process = subprocess.Popen([sys.executable, "-m", "agentgrpo.cli", *argv[:-1], "progress=true"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and process.poll() is None:
            log = out / "transcripts.jsonl"
            if log.is_file() and len(log.read_text().splitlines()) >= 3:
                break
            time.sleep(0.1)
        process.send_signal(signal.SIGKILL)
        stderr = process.communicate()[1]
        assert "eval[openai]" in stderr  # the progress bar was drawn
        before = records(out)
        assert 3 <= len(before) < 8
        requests_before = len(server.bodies)
        assert main([*argv, "--resume"]) == 0
        requests_after = len(server.bodies) - requests_before
    report = json.loads((out / "eval.json").read_text())
    assert report["resumed"] == len(before) and report["episodes_run"] == 8 - len(before)
    after = records(out)
    assert sorted((r["task_id"], r["trial"]) for r in after) == sorted({(r["task_id"], r["trial"]) for r in after})
    assert len(after) == 8 and all(r in after for r in before)  # finished episodes kept as they were
    # at most two turns per unplayed episode (plus the one that may have been cut by the kill)
    assert 0 < requests_after <= 2 * (8 - len(before))


def test_a_checkpoint_evaluation_logs_each_episode_as_it_ends(tiny_policy_dir, tmp_path):
    # 8 episodes on 2 rows in one rollout run: the log gets each episode when it ends (a kill
    # keeps them), not when the whole batch is over
    from agentgrpo.envs.airline.factory import build_env
    from agentgrpo.eval.cli import load_eval_config
    from agentgrpo.eval.runner import _play_checkpoint, episode_jobs
    from agentgrpo.eval.tasks import eval_tasks

    config = load_eval_config([*EIGHT_EPISODES, "rollout.max_turns=3", "rollout.max_new_tokens=12", "max_batch=8",
                               "rollout.max_batch=2",
                               f"policy={tiny_policy_dir}", f"out_dir={tmp_path}"])
    jobs = episode_jobs(config, eval_tasks(config, build_env(config.env)))
    handed: list[tuple[float, EpisodeRecord]] = []
    _play_checkpoint(config, jobs, lambda record: handed.append((time.perf_counter(), record)))
    finished = time.perf_counter()
    assert sorted(record.key for _, record in handed) == sorted(job.key for job in jobs) and len(jobs) == 8
    assert all(not record.aborted and record.turn_tokens for _, record in handed)
    first, last = handed[0][0], handed[-1][0]
    assert last - first > 0.25 * (finished - first)  # handed over along the way, not all at the end


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("settings", [
    ["--policy", "openai", "endpoint.base_url=http://127.0.0.1:{port}/v1"],
    ["--policy", "oracle", "env.user.kind=llm", "env.user.base_url=http://127.0.0.1:{port}/v1"],
])
def test_an_unreachable_server_fails_fast_before_any_episode(settings, tmp_path, capsys):
    port = closed_port()
    start = time.perf_counter()
    code = main(["eval", *[s.format(port=port) for s in settings], "--out", str(tmp_path / "eval"),
                 *EIGHT_EPISODES])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and f"127.0.0.1:{port}" in err[0] and "cannot connect" in err[0]
    assert time.perf_counter() - start < 10 and not (tmp_path / "eval" / "transcripts.jsonl").exists()


def test_summarize_leaves_aborted_episodes_out_by_hand():
    def rec(task, trial, ok, aborted=False):
        return EpisodeRecord(task, "unseen", "fam", trial, 1.0 if ok else 0.0, False, [10], "user_stop",
                             aborted=aborted)

    records_ = [rec("a", 0, True), rec("a", 1, True), rec("b", 0, True), rec("b", 1, False, aborted=True),
                rec("c", 0, False, aborted=True), rec("c", 1, False, aborted=True)]
    metrics, per_task = summarize(records_, trials=2, split_sizes={"unseen": 3})
    assert metrics["aborted"] == 3 and metrics["episodes"] == 3 and metrics["tasks"] == 3
    assert metrics["pass^k"][1] == 1.0  # a: 2/2, b: 1/1; c has no finished trial
    assert metrics["pass^k"][2] == 1.0 and metrics["pass^k_tasks"] == {1: 2, 2: 1}  # only a has two
    assert [t["task_id"] for t in per_task] == ["a", "b"]
