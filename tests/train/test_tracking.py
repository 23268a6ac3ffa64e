"""Trackers as their users expect: one ``logging`` key everywhere, W&B online when logged in, run names
with experiment and seed, a resumed run continuing its W&B run, eval's summary logged, ablate's progress.

W&B runs here in its real offline mode (no network); "logged in" is a netrc file with a fake key,
read the way ``wandb login`` writes it, and checked without starting an online run.
"""
from __future__ import annotations

import json
import sys

import pytest
from helpers import SMALL_ENV_OVERRIDES

from agentgrpo.config import ConfigError, load_config
from agentgrpo.eval.evaluator import EvalConfig
from agentgrpo.jobs.ablate_grid import Job, run_jobs
from agentgrpo.tracking import TRACKING_FILE, flat_numbers, make_tracker, read_metrics, wandb_mode
from agentgrpo.train.grpo_config import GRPOConfig
from agentgrpo.train.sft_config import SFTConfig


@pytest.fixture
def no_wandb_login(tmp_path, monkeypatch):
    """No credentials: no key in the environment, an empty netrc, W&B's files under tmp_path."""
    for key in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL"):
        monkeypatch.delenv(key, raising=False)
    netrc = tmp_path / "netrc"
    netrc.write_text("")
    monkeypatch.setenv("NETRC", str(netrc))
    for key in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(key, str(tmp_path / "wandb-home"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    return netrc


@pytest.mark.parametrize("schema, defaults", [(SFTConfig, "sft.yaml"), (GRPOConfig, "grpo.yaml"),
                                              (EvalConfig, "eval.yaml")])
def test_one_logging_key_for_sft_train_and_eval(schema, defaults):
    config = load_config(schema, ["logging.trackers=[tensorboard,wandb]", "logging.project=airline"],
                         defaults=defaults)
    assert (config.logging.trackers, config.logging.project) == (["tensorboard", "wandb"], "airline")
    with pytest.raises(ConfigError, match="logging.trackers"):
        load_config(schema, ["logging.trackers=[mlflow]"], defaults=defaults)


def test_wandb_is_online_when_logged_in_and_wandb_mode_wins(no_wandb_login, monkeypatch):
    assert wandb_mode() == "offline"
    no_wandb_login.write_text("machine api.wandb.ai\n  login user\n  password fake0123456789fake0123456789fake0123\n")
    assert wandb_mode() == "online"  # `wandb login` wrote this entry
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.internal")
    assert wandb_mode() == "offline"  # the key is for another host
    monkeypatch.setenv("WANDB_API_KEY", "fake-key")
    assert wandb_mode() == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wandb_mode() == "disabled"


def test_a_resumed_run_continues_its_wandb_run(no_wandb_login, tmp_path):
    pytest.importorskip("wandb")
    run_dir = tmp_path / "run"
    tracker = make_tracker(run_dir, ["wandb"], run_name="joint-seed1", group="joint", config={"seed": 1})
    [jsonl, wandb_tracker] = tracker.trackers
    assert wandb_tracker.mode == "offline"  # not logged in
    assert (wandb_tracker._run.name, wandb_tracker._run.group) == ("joint-seed1", "joint")
    first_id = wandb_tracker.run_id
    tracker.log({"reward/mean": 0.5}, step=1)
    tracker.log({"reward/mean": 0.6}, step=2)
    tracker.close()
    assert json.loads((run_dir / TRACKING_FILE).read_text()) == {"wandb_run_id": first_id}

    resumed = make_tracker(run_dir, ["wandb"], run_name="joint-seed1", config={"seed": 1}, resume_from_step=1)
    assert resumed.trackers[1].run_id == first_id
    resumed.log({"reward/mean": 0.7}, step=2)
    resumed.close()
    assert [r["reward/mean"] for r in read_metrics(run_dir / "metrics.jsonl")] == [0.5, 0.7]
    # Both parts carry one id; wandb suffixes "-1" when both start within the same second.
    parts = [p for p in (run_dir / "wandb").glob("offline-run-*") if first_id in p.name]
    assert len(parts) == 2

    fresh = make_tracker(run_dir, ["wandb"], run_name="joint-seed1", config={"seed": 1})  # not a resume
    assert fresh.trackers[1].run_id != first_id
    fresh.close()


def test_flat_numbers_keeps_finite_numbers_under_path_keys():
    summary = {"pass^k": {"1": 0.5, "2": 0.25}, "ci": {"pass^k": {"1": {"low": 0.4, "high": 0.6}}},
               "aborted": 0, "note": "x", "ok": True, "nan": float("nan"), "depths": [3, 4]}
    assert flat_numbers(summary, "eval/") == {
        "eval/pass^k/1": 0.5, "eval/pass^k/2": 0.25, "eval/ci/pass^k/1/low": 0.4, "eval/ci/pass^k/1/high": 0.6,
        "eval/aborted": 0.0, "eval/depths/0": 3.0, "eval/depths/1": 4.0}


def test_eval_logs_its_summary_to_the_trackers(tmp_path):
    from agentgrpo.cli import main

    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "eval"
    code = main(["eval", "--policy", "oracle", "--out", str(out), "trials=1", "splits=[unseen]", "progress=false",
                 "logging.trackers=[tensorboard]", *SMALL_ENV_OVERRIDES])
    assert code == 0
    report = json.loads((out / "eval.json").read_text())
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    [logged] = events.Scalars("eval/pass^k/1")
    assert (logged.step, logged.value) == (0, pytest.approx(report["metrics"]["pass^k"]["1"]))
    assert not (out / "metrics.jsonl").exists()  # eval.json is the evaluation's record


def test_ablate_shows_a_progress_bar_over_its_jobs(tmp_path, capsys):
    jobs = [Job(name, [sys.executable, "-c", f"open({str(tmp_path / name)!r}, 'w')"], tmp_path / name)
            for name in ("a", "b", "c")]
    (tmp_path / "a").write_text("done")  # finished before: not counted
    assert run_jobs(jobs, 1, tmp_path / "logs") == []
    err = capsys.readouterr()
    assert "ablate jobs" in err.err and "2/2" in err.err and "<" in err.err  # count and time left (elapsed<left)
    assert "finished b" in err.err or "finished b" in err.out


def test_ablate_passes_one_logging_key_to_every_stage(tmp_path):
    from agentgrpo.jobs.ablate import _check_configs, make_plan

    plan = make_plan(tmp_path, experiments=["vanilla"], overrides=["logging.trackers=[tensorboard]"])
    assert all("logging.trackers=[tensorboard]" in plan.overrides[stage] for stage in ("sft", "grpo", "eval"))
    _check_configs(plan)  # sft, train and eval each accept it
