"""The documentation's commands work on a fresh clone.

Every command block of README.md and docs/*.md marked runnable — the line ``<!-- runnable -->``
right before a ```bash fence — is run, command by command, with the installed ``agentgrpo``,
from an empty directory laid out like a fresh clone (its ``examples/``, no data, no runs,
no τ-bench directory beside it). Only fast commands are marked: ``--help``, ``--print-config``,
listings and dry runs. Blocks with placeholders (``DIR``, ``URL``) or long jobs stay unmarked.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentgrpo.cli import main

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- runnable -->"
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def runnable_commands(path: Path) -> list[tuple[int, str]]:
    """``(line, command)`` of every command in the file's runnable blocks (``\\`` continuations joined)."""
    lines = path.read_text().splitlines()
    found: list[tuple[int, str]] = []
    for index, line in enumerate(lines):
        if line.strip() != MARKER:
            continue
        fence = lines[index + 1].strip() if index + 1 < len(lines) else ""
        if fence not in ("```bash", "```sh"):
            raise ValueError(f"{path.name}:{index + 1}: {MARKER} must be followed by a ```bash block")
        pending, start = "", 0
        for number in range(index + 2, len(lines)):
            text = lines[number]
            if text.strip() == "```":
                break
            if not pending:
                start = number + 1
            pending += text.rstrip()
            if pending.endswith("\\"):
                pending = pending[:-1] + " "
                continue
            if pending.strip() and not pending.lstrip().startswith("#"):
                found.append((start, pending.strip()))
            pending = ""
        else:
            raise ValueError(f"{path.name}:{index + 1}: the runnable block is not closed")
    return found


COMMANDS = [(path, line, command) for path in DOC_FILES for line, command in runnable_commands(path)]


def test_the_docs_mark_their_checkable_commands():
    """A misspelt marker would silently test nothing: the README and the guides keep theirs."""
    files = {path.name for path, _, _ in COMMANDS}
    assert {"README.md", "training.md", "evaluation.md", "real-models.md", "scale.md"} <= files
    assert len(COMMANDS) >= 12


@pytest.fixture
def fresh_clone(tmp_path: Path) -> Path:
    """An empty working directory with the clone's examples/ (what `bash examples/...` needs)."""
    clone = tmp_path / "agentgrpo"
    clone.mkdir()
    (clone / "examples").symlink_to(ROOT / "examples")
    return clone


@pytest.mark.parametrize("path, line, command", COMMANDS,
                         ids=[f"{path.name}:{line}" for path, line, _ in COMMANDS])
def test_a_runnable_command_runs(path: Path, line: int, command: str, fresh_clone: Path):
    if "examples/verl/" in command and importlib.util.find_spec("verl") is None:
        pytest.skip("needs the verl extra (pip install -e '.[verl]')")
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("AGENTGRPO_", "VERL_USE", "TAU_BENCH", "WANDB_"))}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", HF_HUB_OFFLINE="1",
               WANDB_MODE="disabled", OMP_NUM_THREADS="1")
    run = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=fresh_clone, env=env, capture_output=True,
                         text=True, timeout=600)
    where = f"{path.name}:{line}: {command}"
    assert run.returncode == 0, f"{where}\n{run.stdout[-2000:]}\n{run.stderr[-3000:]}"
    assert "Traceback" not in run.stderr, f"{where}\n{run.stderr[-3000:]}"
    if "DRY_RUN=1" in command:  # from a clone without τ-bench data: the fallback, said once
        assert "no τ-bench data" in run.stderr and "generated tasks with the scripted user" in run.stderr
        assert "nothing replaced" in run.stdout


def test_env_tasks_finds_tau_bench_data_where_import_writes_it(tau_bench_dir, fresh_clone, monkeypatch, capsys):
    """`agentgrpo env import-tau-bench CLONE` writes data/tau_bench_airline; `env tasks --source tau_bench` reads it."""
    monkeypatch.delenv("AGENTGRPO_TAU_BENCH_DIR", raising=False)
    imported = fresh_clone / "data" / "tau_bench_airline"
    imported.mkdir(parents=True)
    for name in ("users.json", "flights.json", "reservations.json", "policy.md"):
        (imported / name).symlink_to(tau_bench_dir / name)
    tasks = json.loads((tau_bench_dir / "tasks_test.json").read_text())
    (imported / "tasks_test.json").write_text(json.dumps(tasks[:3]))  # tells this copy from any other
    monkeypatch.chdir(fresh_clone)
    assert main(["env", "tasks", "--source", "tau_bench"]) == 0
    assert capsys.readouterr().out.strip().endswith("3 tasks")
