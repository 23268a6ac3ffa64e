"""Smoke tests of ``agentgrpo env tasks|show|play|oracle``."""
from __future__ import annotations

import io
import json
import subprocess
import sys

from agentgrpo.cli import main


def test_env_tasks_generated_and_split(capsys):
    assert main(["env", "tasks", "--n-tasks", "30"]) == 0
    out = capsys.readouterr().out
    assert "gen-0-0-" in out and out.strip().endswith("30 tasks")
    assert main(["env", "tasks", "--split", "unseen"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == "10 tasks" and all("unseen" in line for line in lines[:-1])


def test_env_tasks_tau_bench(capsys, tau_bench_dir):
    assert main(["env", "tasks", "--source", "tau_bench", "--data-dir", str(tau_bench_dir)]) == 0
    out = capsys.readouterr().out
    assert "mia_li_3668" in out and out.strip().endswith("50 tasks")


def test_env_show(capsys):
    assert main(["env", "show", "2", "--n-tasks", "10"]) == 0
    out = capsys.readouterr().out
    assert "instruction: Your user id is" in out and "gold actions:" in out
    assert '"confirmations"' in out and "outputs:" in out
    assert main(["env", "show", "gen-0-1-info_reservation_total", "--n-tasks", "10"]) == 0
    assert "info_reservation_total" in capsys.readouterr().out


def _calls(records: list[dict]) -> list[dict]:
    """Every tool call (its ``function``) of the recorded episodes."""
    return [c["function"] for r in records for m in r["messages"] for c in m.get("tool_calls") or []]


def test_env_oracle_writes_transcripts(capsys, tmp_path):
    out_file = tmp_path / "transcripts.jsonl"
    assert main(["env", "oracle", "--n", "20", "--out", str(out_file)]) == 0
    out = capsys.readouterr().out
    overall = next(line for line in out.splitlines() if line.startswith("overall"))
    assert overall.split()[1:] == ["20", "1.000"]
    records = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert len(records) == 20 and all(r["reward"] == 1.0 for r in records)
    assert records[0]["messages"][0]["role"] == "system"
    assert not any("The user wants" in (m.get("content") or "") for r in records for m in r["messages"])
    assert main(["env", "oracle", "--n", "20", "--goal", "--out", str(out_file)]) == 0
    assert next(line for line in capsys.readouterr().out.splitlines() if line.startswith("overall")).split()[1:] \
        == ["20", "1.000"]
    records = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert all(any("The user wants" in (m.get("content") or "") for m in r["messages"]) for r in records)
    assert not any(call["name"] == "think" for call in _calls(records))
    assert main(["env", "oracle", "--n", "20", "--goal-think", "--out", str(out_file)]) == 0
    assert next(line for line in capsys.readouterr().out.splitlines() if line.startswith("overall")).split()[1:] \
        == ["20", "1.000"]
    records = [json.loads(line) for line in out_file.read_text().splitlines()]
    thoughts = [json.loads(call["arguments"])["thought"] for call in _calls(records) if call["name"] == "think"]
    assert thoughts and all(t.startswith("The user wants ") for t in thoughts)


def test_env_play_driven_by_stdin(capsys, monkeypatch):
    from agentgrpo.envs.airline.tasks.generate import generate_domain

    task = next(t for t in generate_domain(0, n_tasks=23).tasks if t.family == "cancel_refused")
    script = "\n".join([
        "Could you please give me your user id?",
        f'/tool get_user_details {{"user_id": "{task.user_id}"}}',
        "/tool no_such_tool {}",
        "I'm sorry, but I cannot cancel that reservation.",
    ]) + "\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(script))
    assert main(["env", "play", task.task_id, "--n-tasks", "23"]) == 0
    out = capsys.readouterr().out
    assert "user: " in out and task.user_id in out
    assert "tool no_such_tool: Error" in out
    assert "episode over (user_stop); reward = 1.0" in out


def test_env_play_quit_reports_the_reward_so_far(capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n/quit\n"))
    assert main(["env", "play", "0", "--n-tasks", "5"]) == 0
    assert "quit; the reward at this point would be 0.0" in capsys.readouterr().out


def test_env_commands_do_not_import_torch():
    code = ("import sys; from agentgrpo.cli import main; "
            "main(['env', 'tasks', '--n-tasks', '3']); assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_env_oracle_out_in_a_new_directory_or_an_unwritable_one(capsys, tmp_path):
    out_file = tmp_path / "new" / "dir" / "transcripts.jsonl"
    assert main(["env", "oracle", "--n", "2", "--out", str(out_file)]) == 0
    assert len(out_file.read_text().splitlines()) == 2
    capsys.readouterr()
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert main(["env", "oracle", "--n", "2", "--out", str(blocker / "x.jsonl")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("agentgrpo: --out: cannot create directory")
