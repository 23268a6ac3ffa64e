"""A GRPO run killed with SIGKILL and resumed repeats the uninterrupted run exactly."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers import SMALL_ENV_OVERRIDES
from safetensors.torch import load_file

from agentgrpo.train.tracking import read_metrics


def command(policy_dir: Path, run_dir: Path) -> list[str]:
    return [
        sys.executable, "-m", "agentgrpo.cli", "train", "experiment=joint",
        *SMALL_ENV_OVERRIDES, f"policy.init={policy_dir}", f"run_dir={run_dir}",
        "rollout.max_turns=2", "rollout.max_new_tokens=12", "rollout.max_total_tokens=900",
        "trainer.steps=4", "trainer.save_every=2", "trainer.tasks_per_step=2", "trainer.group_size=2",
        "trainer.mini_batch_size=2", "trainer.micro_batch_size=2", "trainer.lr=1e-3",
        "algo.entropy_coef=0.01", "logging.progress=false",
    ]


def metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return read_metrics(path) if path.exists() else []


def comparable(record: dict) -> dict:
    return {k: v for k, v in record.items() if not k.startswith("perf/")}


def test_sigkill_and_resume_reproduce_the_uninterrupted_run(tiny_policy_dir, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    subprocess.run(command(tiny_policy_dir, straight) + ["trainer.lld_diagnostic=true"], env=env, check=True,
                   capture_output=True, timeout=600)

    process = subprocess.Popen(command(tiny_policy_dir, killed) + ["trainer.lld_diagnostic=true"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while time.time() < deadline and not any(r["step"] == 3 for r in metrics(killed)):
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert (killed / "checkpoints" / "step_000002").is_dir()
    assert not (killed / "final").exists()  # it really died before the end

    resume = command(tiny_policy_dir, killed) + ["trainer.lld_diagnostic=true", "--resume"]
    subprocess.run(resume, env=env, check=True, capture_output=True, timeout=600)

    a, b = metrics(straight), metrics(killed)
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    assert [comparable(r) for r in a] == [comparable(r) for r in b]
    weights_a = load_file(str(straight / "final" / "model.safetensors"))
    weights_b = load_file(str(killed / "final" / "model.safetensors"))
    assert weights_a.keys() == weights_b.keys()
    for name in weights_a:
        assert (weights_a[name] == weights_b[name]).all(), name
