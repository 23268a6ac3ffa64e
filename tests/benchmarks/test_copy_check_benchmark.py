"""The copy-check benchmark scores a checkpoint and refuses a preset with random weights."""
from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "copy_check.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], env={**os.environ, "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=300, check=False)


def test_copy_check_benchmark_scores_a_checkpoint_on_held_out_worlds(tiny_policy_dir):
    result = _run(str(tiny_policy_dir), "--tasks", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    row = next(line for line in result.stdout.splitlines() if line.startswith(f"| {tiny_policy_dir} |"))
    ids, token, whole, first, cont = (float(cell) for cell in row.split("|")[2:7])
    assert ids >= 2 and all(0 <= v <= 1 for v in (token, whole, first, cont)) and whole <= first
    lines = dict(re.findall(r"^BENCH (\S+) (\S+) target info$", result.stdout, re.MULTILINE))
    assert abs(float(lines[f"copy_id_acc_{tiny_policy_dir.name}"]) - whole) < 1e-3  # table: 3 decimals


def test_copy_check_benchmark_refuses_a_built_preset():
    result = _run("tiny", "--tasks", "2")
    assert result.returncode != 0 and "random weights" in result.stderr


def test_copy_task_benchmark_trains_from_scratch_and_reports_chance():
    script = SCRIPT.parent / "copy_task.py"
    result = subprocess.run([sys.executable, str(script), "--preset", "toy", "--steps", "50", "--pool", "20",
                             "--context", "16", "--length", "4"], env={**os.environ, "OMP_NUM_THREADS": "1"},
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = {name: float(value) for name, value in re.findall(r"^BENCH (\S+) (\S+) target info$", result.stdout,
                                                                re.MULTILINE)}
    assert lines["copy_task_chance"] == pytest.approx(2.996, abs=1e-3) and lines["copy_task_steps"] == 50
    assert 0 < lines["copy_task_final_loss"] < 10


def test_copy_task_benchmark_trains_the_slot_recall_task_and_reports_its_chance():
    script = SCRIPT.parent / "copy_task.py"
    result = subprocess.run([sys.executable, str(script), "--task", "slot", "--preset", "toy", "--steps", "50",
                             "--context", "24"], env={**os.environ, "OMP_NUM_THREADS": "1"},
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = {name: float(value) for name, value in re.findall(r"^BENCH (\S+) (\S+) target info$", result.stdout,
                                                                re.MULTILINE)}
    chance = (math.log(48) + math.log(4) + math.log(12) + math.log(16)) / 4  # the airline's kinds' slots
    assert lines["copy_task_chance"] == pytest.approx(chance, abs=1e-3) and lines["copy_task_steps"] == 50
    assert 0 < lines["copy_task_final_loss"] < 10
