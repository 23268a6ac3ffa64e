"""Resuming: a run killed with SIGKILL and resumed repeats the uninterrupted run exactly;
a resume with a different config is refused unless forced; checkpoints are saved safely."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import SMALL_ENV_OVERRIDES
from safetensors.torch import load_file

from agentgrpo.config import ConfigError, load_config
from agentgrpo.policy.hf import load_policy
from agentgrpo.tracking import read_metrics
from agentgrpo.train.checkpoint import (
    RFT_ROUNDS_DIR,
    can_continue,
    latest_checkpoint,
    list_checkpoints,
    load_trainer_state,
    remove_stale,
    save_checkpoint,
)
from agentgrpo.train.grpo import GRPOTrainer
from agentgrpo.train.grpo_config import GRPOConfig
from agentgrpo.train.resume import ResumeConfigError, check_resume_config, config_differences


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


# ------------------------------------------------------------------ config checks on resume
def fast_config(policy_dir: Path, run_dir: Path, *overrides: str) -> GRPOConfig:
    return load_config(GRPOConfig, [
        "experiment=joint", *SMALL_ENV_OVERRIDES, f"policy.init={policy_dir}", f"run_dir={run_dir}",
        "rollout.max_turns=2", "rollout.max_new_tokens=8", "rollout.max_total_tokens=900",
        "trainer.steps=1", "trainer.tasks_per_step=2", "trainer.group_size=2", "trainer.mini_batch_size=2",
        "trainer.micro_batch_size=1", "trainer.lr=1e-3", "logging.progress=false", *overrides,
    ], defaults="grpo.yaml")


@pytest.fixture(scope="module")
def one_step_run(tiny_policy_dir, tmp_path_factory) -> Path:
    """A finished one-step run (checkpoint step_000001); tests resume copies of it."""
    run_dir = tmp_path_factory.mktemp("one_step") / "run"
    GRPOTrainer(fast_config(tiny_policy_dir, run_dir)).train()
    return run_dir


@pytest.fixture
def run_copy(one_step_run, tmp_path) -> Path:
    return Path(shutil.copytree(one_step_run, tmp_path / "run"))


def test_a_plain_run_counts_no_non_finite_rewards(one_step_run):
    assert [r["reward/non_finite"] for r in metrics(one_step_run)] == [0.0]


def test_resume_with_a_different_config_is_refused_naming_the_keys(tiny_policy_dir, run_copy):
    changed = fast_config(tiny_policy_dir, run_copy, "experiment=vanilla", "seed=1", "trainer.lr=2e-3")
    with pytest.raises(ResumeConfigError) as caught:
        GRPOTrainer(changed, resume=True)
    message = str(caught.value)
    assert isinstance(caught.value, ConfigError) and "\n" not in message
    assert "seed (0 → 1)" in message
    assert "trainer.lr (0.001 → 0.002)" in message
    assert "experiment ('joint' → 'vanilla')" in message
    assert "reward.process_coef (0.3 → 0.0)" in message  # what experiment=vanilla changes
    assert "--force" in message and "step_000001" in message
    assert [r["step"] for r in metrics(run_copy)] == [1]  # nothing ran


def test_resume_may_extend_the_run_and_change_logging_and_saving(tiny_policy_dir, run_copy):
    (run_copy / "checkpoints" / "step_abc").mkdir()  # not a checkpoint: ignored (it used to crash resume)
    (run_copy / "checkpoints" / "notes").mkdir()
    stale = run_copy / "checkpoints" / ".step_000002.tmp-123"  # left by a run killed while saving
    stale.mkdir()
    (stale / "trainer_state.json").write_text("{")
    config = fast_config(tiny_policy_dir, run_copy, "trainer.steps=2", "trainer.save_every=1",
                         "trainer.keep_last=1", "trainer.lld_diagnostic=false", "logging.progress=true")
    trainer = GRPOTrainer(config, resume=True)
    assert trainer.start_step == 1 and not stale.exists()
    trainer.train()
    assert [r["step"] for r in metrics(run_copy)] == [1, 2]
    assert [p.name for p in list_checkpoints(run_copy)] == ["step_000002"]  # keep_last=1
    assert (run_copy / "checkpoints" / "step_abc").is_dir()  # left alone, not pruned


def cli_args(policy_dir: Path, run_dir: Path, *extra: str) -> list[str]:
    return ["train", "experiment=joint", *SMALL_ENV_OVERRIDES, f"policy.init={policy_dir}", f"run_dir={run_dir}",
            "rollout.max_turns=2", "rollout.max_new_tokens=8", "rollout.max_total_tokens=900",
            "trainer.steps=2", "trainer.tasks_per_step=2", "trainer.group_size=2", "trainer.mini_batch_size=2",
            "trainer.micro_batch_size=1", "logging.progress=false", *extra]


def test_the_cli_refuses_in_one_line_with_exit_code_2(tiny_policy_dir, run_copy, capsys):
    from agentgrpo.cli import main

    assert main(cli_args(tiny_policy_dir, run_copy, "trainer.lr=2e-3", "seed=1", "--resume")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "seed (0 → 1)" in err and "--force" in err
    assert [r["step"] for r in metrics(run_copy)] == [1]


def test_force_resumes_despite_differences_through_the_cli(tiny_policy_dir, run_copy):
    from agentgrpo.cli import main

    args = cli_args(tiny_policy_dir, run_copy, "trainer.lr=2e-3", "seed=1", "--resume", "--force")
    with pytest.warns(UserWarning, match=r"seed \(0 → 1\).*trainer.lr.*resuming anyway"):
        assert main(args) == 0
    assert [r["step"] for r in metrics(run_copy)] == [1, 2]
    assert load_trainer_state(latest_checkpoint(run_copy))["config"]["seed"] == 1


def test_resume_of_a_finished_run_without_checkpoints_is_refused(tiny_policy_dir, run_copy, capsys):
    """A finished run that kept no checkpoint has nothing to resume: starting over would overwrite
    its record, so ``--resume`` refuses (exit 2, one line) and leaves config.yaml and metrics alone."""
    from agentgrpo.cli import main

    shutil.rmtree(run_copy / "checkpoints")
    (run_copy / "final").mkdir(exist_ok=True)
    config_before = (run_copy / "config.yaml").read_text()
    assert main(cli_args(tiny_policy_dir, run_copy, "trainer.steps=1", "--resume")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nothing to resume" in err and "final/" in err and "--force" in err
    assert [r["step"] for r in metrics(run_copy)] == [1]
    assert (run_copy / "config.yaml").read_text() == config_before


def test_resume_without_checkpoint_or_final_starts_over(tmp_path):
    """A run killed before its first save has no checkpoint and no final/: it starts over; a
    finished one does only under force, with a warning."""
    from agentgrpo.train.resume import NothingToResumeError, resume_checkpoint

    config = GRPOConfig()
    assert resume_checkpoint(tmp_path, config) is None
    (tmp_path / "final").mkdir()
    with pytest.raises(NothingToResumeError, match="nothing to resume"):
        resume_checkpoint(tmp_path, config)
    with pytest.warns(UserWarning, match="starting over"):
        assert resume_checkpoint(tmp_path, config, force=True) is None


def test_a_run_can_continue_from_its_own_or_an_earlier_rft_rounds_checkpoint(tmp_path):
    run = tmp_path / "sft"
    assert not can_continue(run)
    (run / "checkpoints" / ".step_000002.tmp-1").mkdir(parents=True)  # a killed save is no checkpoint
    (run / RFT_ROUNDS_DIR / "round0" / "final").mkdir(parents=True)  # a finished round is nothing to continue
    assert not can_continue(run)
    (run / RFT_ROUNDS_DIR / "round1" / "checkpoints" / "step_000004").mkdir(parents=True)
    assert can_continue(run)
    shutil.rmtree(run / RFT_ROUNDS_DIR)
    (run / "checkpoints" / "step_000002").mkdir()
    assert can_continue(run)


def test_allow_list_and_cosine_horizon():
    saved = {"seed": 0, "run_dir": "a", "logging": {"trackers": []},
             "trainer": {"steps": 4, "lr_schedule": "constant", "keep_last": 2}}
    moved = {"seed": 0, "run_dir": "b", "logging": {"trackers": ["tensorboard"]},
             "trainer": {"steps": 8, "lr_schedule": "constant", "keep_last": 0}}
    assert config_differences(saved, moved) == {}
    assert config_differences({"policy": {"cpu_autocast": False}}, {"policy": {"cpu_autocast": True}}) == {}
    cosine = {**saved, "trainer": {**saved["trainer"], "lr_schedule": "cosine"}}
    longer = {**cosine, "trainer": {**cosine["trainer"], "steps": 8}}
    assert config_differences(cosine, longer) == {"trainer.steps": (4, 8)}  # the decay horizon moves
    added = {**saved, "algo": {"new_knob": 1}}
    assert list(config_differences(saved, added)) == ["algo.new_knob"]
    assert repr(config_differences(saved, added)["algo.new_knob"][0]) == "<absent>"
    # a key added since the checkpoint: no difference at its schema default, one elsewhere
    assert config_differences(saved, added, defaults={"algo": {"new_knob": 1}}) == {}
    assert list(config_differences(saved, added, defaults={"algo": {"new_knob": 0}})) == ["algo.new_knob"]
    assert list(config_differences(added, saved, defaults={"algo": {"new_knob": 1}})) == ["algo.new_knob"]  # removed


def test_a_changed_default_resumes_old_checkpoints_with_their_value(tmp_path):
    from agentgrpo.config import to_dict
    from agentgrpo.train.resume import keep_changed_defaults

    old = to_dict(GRPOConfig())
    del old["trainer"]["skip_zero_grad_steps"]  # written before the key existed: AdamW stepped on zero gradients
    (tmp_path / "trainer_state.json").write_text(json.dumps({"step": 1, "config": old}))
    config = GRPOConfig()
    assert config.trainer.skip_zero_grad_steps  # the default now
    # as the schema's default the absent key would look unchanged, yet the old run did not skip
    assert config_differences(old, to_dict(config), defaults=to_dict(GRPOConfig())) == {
        "trainer.skip_zero_grad_steps": (False, True)}
    with pytest.warns(UserWarning, match="skip_zero_grad_steps=False"):
        assert keep_changed_defaults(tmp_path, config, to_dict(GRPOConfig())) == {"trainer.skip_zero_grad_steps": False}
    assert not config.trainer.skip_zero_grad_steps
    assert check_resume_config(tmp_path, tmp_path, to_dict(config), defaults=to_dict(GRPOConfig())) == {}
    recorded = {**old, "trainer": {**old["trainer"], "skip_zero_grad_steps": True}}
    (tmp_path / "trainer_state.json").write_text(json.dumps({"step": 1, "config": recorded}))
    assert keep_changed_defaults(tmp_path, GRPOConfig(), to_dict(GRPOConfig())) == {}  # already the new value


# ------------------------------------------------------------------ checkpoint files
@pytest.fixture(scope="module")
def tiny_policy(tiny_policy_dir):
    return load_policy(tiny_policy_dir)


class FullDiskTokenizer:
    """A tokenizer whose save writes half a file and then fails, like a full disk."""

    def save_pretrained(self, directory: str) -> None:
        (Path(directory) / "tokenizer.json").write_text('{"version"')
        raise OSError(28, "No space left on device")


def save(run_dir: Path, step: int, policy, note: str, tokenizer=None, keep_last=None) -> Path:
    model, real_tokenizer = policy
    return save_checkpoint(run_dir, step, model, tokenizer or real_tokenizer, None, None, {"note": note},
                           keep_last=keep_last)


def test_resaving_a_step_failing_midway_keeps_the_old_checkpoint(tiny_policy, tmp_path):
    first = save(tmp_path, 1, tiny_policy, "first")
    files = sorted(p.relative_to(first) for p in first.rglob("*"))
    with pytest.raises(OSError, match="No space"):
        save(tmp_path, 1, tiny_policy, "second", tokenizer=FullDiskTokenizer())
    assert sorted(p.relative_to(first) for p in first.rglob("*")) == files
    assert load_trainer_state(first)["note"] == "first"
    model, _ = load_policy(first / "model")  # still loads
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_000001"]  # no leftovers

    save(tmp_path, 1, tiny_policy, "third")  # a successful re-save replaces it
    assert load_trainer_state(first)["note"] == "third"
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_000001"]


def test_stale_directories_of_a_killed_save_are_cleaned_up(tiny_policy, tmp_path):
    root = tmp_path / "checkpoints"
    save(tmp_path, 1, tiny_policy, "one")
    (root / "step_000001").rename(root / ".step_000001.old-77")  # killed between the two renames
    (root / ".step_000002.tmp-123").mkdir()
    (root / ".step_000003.tmp-9").mkdir()
    (root / ".step_000005.del-3").mkdir()  # killed while pruning it (keep_last)
    (root / "step_abc").mkdir()
    assert list_checkpoints(tmp_path) == []
    remove_stale(tmp_path)
    assert sorted(p.name for p in root.iterdir()) == ["step_000001", "step_abc"]
    assert load_trainer_state(root / "step_000001")["note"] == "one"  # put back
    (root / ".step_000004.tmp-5").mkdir()
    save(tmp_path, 2, tiny_policy, "two")  # the next save cleans up too
    assert sorted(p.name for p in root.iterdir()) == ["step_000001", "step_000002", "step_abc"]
    assert latest_checkpoint(tmp_path) == root / "step_000002"


def test_keep_last(tiny_policy, tmp_path):
    with pytest.raises(ValueError, match="keep_last must be >= 0"):
        save(tmp_path, 1, tiny_policy, "x", keep_last=-1)
    for step in (1, 2, 3):
        save(tmp_path, step, tiny_policy, "x", keep_last=0)  # 0 keeps everything
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_000001", "step_000002", "step_000003"]
    save(tmp_path, 4, tiny_policy, "x", keep_last=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_000003", "step_000004"]


def test_a_checkpoint_without_a_config_needs_force(tmp_path):
    checkpoint = tmp_path / "checkpoints" / "step_000001"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"step": 1}))
    with pytest.raises(ResumeConfigError, match="records no config.*--force"):
        check_resume_config(checkpoint, tmp_path, {"seed": 0})
    (tmp_path / "config.yaml").write_text("seed: 0\n")  # the run's config.yaml is the fallback
    assert check_resume_config(checkpoint, tmp_path, {"seed": 0}) == {}
    with pytest.raises(ResumeConfigError, match=r"seed \(0 → 1\)"):
        check_resume_config(checkpoint, tmp_path, {"seed": 1})
