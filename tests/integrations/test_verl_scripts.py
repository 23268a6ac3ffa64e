"""The veRL launch scripts compose a valid veRL config (Hydra's `--cfg job` dry run, no GPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytestmark = pytest.mark.verl

SCRIPTS = Path(__file__).resolve().parents[2] / "examples" / "verl"


def test_joint_llds_script_dry_run(tmp_path, env_config):
    from agentgrpo.integrations.verl.data import prepare

    data_dir = tmp_path / "data" / "verl_airline_generated"
    prepare(env_config, data_dir)  # in-process: the script then skips its own preparation
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTGRPO_", "VERL_USE"))}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        ENV_SOURCE="generated",
        USER_KIND="scripted",
    )
    run = subprocess.run(
        [
            "bash",
            str(SCRIPTS / "run_joint_llds.sh"),
            "trainer.total_training_steps=7",
            "--cfg",
            "job",
            "--resolve",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-3000:]
    config = run.stdout
    for line in (
        "adv_estimator: agentgrpo_lata",
        "loss_mode: agentgrpo_llds",
        "ppo_mini_batch_size: 2",
        "AGENTGRPO_PRM_COEF: '0.3'",
        "AGENTGRPO_LLDS_COEF: '0.3'",
        "VERL_USE_EXTERNAL_MODULES: agentgrpo.integrations.verl",
        "total_training_steps: 7",
        "loss_agg_mode: token-mean",
        "AGENTGRPO_LOSS_AGG: seq-mean-token-sum",
        "default_agent_loop: agentgrpo_airline",
    ):
        assert line in config, line
    assert f"train_files: {tmp_path}/data/verl_airline_generated/train.parquet" in config
