"""Every expected failure of the ``agentgrpo`` command is one line on stderr and exit code 2.

One row per bad command or config value: the line must name the key or file at fault, and
no traceback may be printed. The rows run in-process (``agentgrpo.cli.main``); a few run the
installed entry point in a subprocess to prove the same end to end, and ``--debug`` /
``AGENTGRPO_DEBUG=1`` bring the traceback back.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentgrpo.cli import main
from agentgrpo.config import ConfigError, DataError


def closed_port() -> int:
    """A loopback port nobody listens on: bound to find a free one, then closed."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_safetensors(path: Path, *, declared: int, actual: int) -> None:
    """A safetensors file whose header lists one float32 tensor of ``declared`` bytes; ``actual`` follow."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [declared // 4], "data_offsets": [0, declared]}}).encode()
    path.write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * actual)


@pytest.fixture
def fake_checkpoint(tmp_path) -> Path:
    """A directory that passes the checkpoint file checks (config, tokenizer, intact safetensors)."""
    path = tmp_path / "ckpt"
    path.mkdir()
    (path / "config.json").write_text("{}")
    (path / "tokenizer.json").write_text("{}")
    write_safetensors(path / "model.safetensors", declared=16, actual=16)
    return path


@pytest.fixture
def tau_bench_without_tasks(tmp_path) -> Path:
    path = tmp_path / "tau"
    path.mkdir()
    for table in ("users", "flights", "reservations"):
        (path / f"{table}.json").write_text("{}")
    (path / "policy.md").write_text("# Airline policy\n")
    return path


# (command line, strings the one line must contain); {ckpt}, {trunc}, {tau}, {port}, {out} are filled in
ROWS = [
    # configs that loaded and failed later (or never)
    (["train", "algo.adv_estimator=nosuch"], ["algo.adv_estimator", "nosuch", "grpo"]),
    (["train", "logging.trackers=[nosuch]"], ["logging.trackers", "tensorboard"]),
    (["train", "trainer.task_splits=[nosuch]"], ["trainer.task_splits", "covered_seen"]),
    (["train", "reward.prm_weights=/missing", "policy.init={ckpt}"], ["reward.prm_weights", "/missing"]),
    (["train", "policy.init={ckpt}", "run_dir={ckpt}/config.json/run"], ["run_dir", "cannot create directory"]),
    (["train", "policy.init={ckpt}", "trainer.shared_rollouts_dir={ckpt}/config.json/shared"],
     ["trainer.shared_rollouts_dir", "config.json/shared"]),
    (["train", "trainer.lr=-1"], ["trainer.lr", ">= 0"]),
    (["train", "trainer.betas=[2,-1]"], ["trainer.betas[0]", "[0, 1)"]),
    (["train", "algo.clip_low=1.5"], ["algo.clip_low", "(0, 1)"]),
    (["train", "algo.turn_discount_alpha=-1"], ["algo.turn_discount_alpha", "> 0"]),
    (["train", "rollout.max_total_tokens=-1"], ["rollout.max_total_tokens", ">= 1"]),
    (["train", "trainer.max_grad_norm=-1"], ["trainer.max_grad_norm", "> 0"]),
    (["train", "trainer.keep_last=-1"], ["trainer.keep_last", ">= 0"]),
    (["train", "trainer.save_every=-5"], ["trainer.save_every", ">= 0"]),
    (["sft", "data.max_length=-5"], ["data.max_length", ">= 1"]),
    (["sft", "trainer.warmup_ratio=5"], ["trainer.warmup_ratio", "[0, 1]"]),
    (["sft", "trainer.save_every=-1"], ["trainer.save_every", ">= 0"]),
    (["sft", "trainer.keep_last=-1"], ["trainer.keep_last", ">= 0"]),
    (["eval", "max_batch=0"], ["max_batch", ">= 1"]),
    (["train", "run_dir=${nope}"], ["run_dir", "nope"]),
    (["train", "env.world.n_users=0"], ["env.world.n_users", ">= 1"]),
    (["train", "algo.adv_estimator=lata", "algo.loss_agg=token-mean"], ["algo.loss_agg", "algo.adv_estimator"]),
    (["train", "experiment=llds", "trainer.mini_batch_size=32"], ["algo.llds_coef", "trainer.mini_batch_size",
                                                                  "trainer.ppo_epochs"]),
    # overrides after flags are parsed as overrides (trials=1 used to be rejected here)
    (["eval", "--policy", "openai", "max_batch=0", "--out", "{out}", "trials=1"], ["max_batch"]),
    (["train", "--config", "/missing.yaml"], ["/missing.yaml"]),
    (["eval", "--bogus"], ["--bogus", "agentgrpo eval --help"]),
    (["env", "tasks", "--n-tasks", "-1"], ["--n-tasks", ">= 1"]),
    # runtime failures: missing checkpoint, broken weights, unreachable server, incomplete data
    (["train"], ["policy.init", "runs/sft/final", "agentgrpo sft"]),
    (["ablate", "--sft", "/nonexistent"], ["--sft", "/nonexistent"]),
    (["eval", "--policy", "{trunc}"], ["model.safetensors", "truncated"]),
    (["train", "policy.init={trunc}"], ["policy.init", "model.safetensors"]),
    (["eval", "--policy", "openai", "endpoint.base_url=http://127.0.0.1:{port}/v1"], ["endpoint.base_url",
                                                                                     "127.0.0.1:{port}"]),
    (["eval", "env.user.kind=llm", "env.user.base_url=http://127.0.0.1:{port}/v1"], ["env.user.base_url"]),
    (["env", "tasks", "--source", "tau_bench", "--data-dir", "{tau}"], ["{tau}", "tasks_test.json"]),
    (["eval", "env.source=tau_bench", "env.data_dir={tau}", "env.user.kind=llm"], ["env.data_dir", "tasks_test.json"]),
    (["verl-prepare", "--out", "{out}", "source=tau_bench", "data_dir={tau}", "user.kind=llm"],
     ["data_dir", "tasks_test.json"]),
]


@pytest.mark.parametrize("argv, expected", ROWS, ids=[" ".join(argv) for argv, _ in ROWS])
def test_bad_command_is_one_line_and_exit_code_2(argv, expected, capsys, monkeypatch, tmp_path, fake_checkpoint,
                                                  tau_bench_without_tasks):
    monkeypatch.chdir(tmp_path)  # no runs/ here: `agentgrpo train` finds no SFT checkpoint
    monkeypatch.delenv("AGENTGRPO_DEBUG", raising=False)
    trunc = tmp_path / "trunc"
    trunc.mkdir()
    for name in ("config.json", "tokenizer.json"):
        (trunc / name).write_text("{}")
    write_safetensors(trunc / "model.safetensors", declared=4096, actual=100)
    fill = {"ckpt": str(fake_checkpoint), "trunc": str(trunc), "tau": str(tau_bench_without_tasks),
            "port": str(closed_port()), "out": str(tmp_path / "out")}
    argv = [a.format(**fill) if "{" in a and "${" not in a else a for a in argv]
    start = time.perf_counter()
    code = run(argv)
    seconds = time.perf_counter() - start
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("agentgrpo")
    for part in expected:
        assert part.format(**fill) in lines[0], lines[0]
    assert seconds < 10  # no retries against a closed port, no model built


def run(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as e:  # argparse's own exits (usage errors)
        return int(e.code or 0)


def test_overrides_may_come_anywhere(capsys, tmp_path):
    argv = ["eval", "--policy", "oracle", "env.n_tasks=60", "--out", str(tmp_path), "trials=1", "--print-config"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "trials: 1" in printed and "n_tasks: 60" in printed and f"out_dir: {tmp_path}" in printed


def test_debug_flag_and_variable_bring_the_traceback_back(monkeypatch):
    with pytest.raises(ConfigError, match="trainer.lr"):
        main(["--debug", "train", "trainer.lr=-1"])
    with pytest.raises(ConfigError, match="trainer.lr"):
        main(["train", "trainer.lr=-1", "--debug"])
    monkeypatch.setenv("AGENTGRPO_DEBUG", "1")
    with pytest.raises(ConfigError, match="trainer.lr"):
        main(["train", "trainer.lr=-1"])


def test_a_truncated_checkpoint_is_named_by_the_loader(tiny_policy_dir, tmp_path):
    """Past the preflight (e.g. a library caller), load_policy names the checkpoint, not a bare SafetensorError."""
    import shutil

    from agentgrpo.policy.hf import load_policy

    broken = tmp_path / "broken"
    shutil.copytree(tiny_policy_dir, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(DataError, match=r"broken .*model\.safetensors"):
        load_policy(broken)
    assert main(["eval", "--policy", str(broken)]) == 2


def entry_point() -> list[str]:
    """The installed ``agentgrpo`` script beside this interpreter, or ``python -m agentgrpo.cli``."""
    script = Path(sys.executable).with_name("agentgrpo")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "agentgrpo.cli"]


def test_the_installed_command_end_to_end(tmp_path):
    """`env` imports no torch, so these two runs of the real script take about a second each."""
    argv, expected = ["env", "tasks", "--source", "tau_bench", "--data-dir", "/nonexistent"], "/nonexistent"
    env = {k: v for k, v in os.environ.items() if k != "AGENTGRPO_DEBUG"}
    result = subprocess.run([*entry_point(), *argv], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and expected in result.stderr and "Traceback" not in result.stderr
    debug = subprocess.run([*entry_point(), "--debug", *argv], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert debug.returncode == 1 and "Traceback" in debug.stderr


def test_verl_prepare_needs_no_verl(tmp_path):
    """Without veRL installed (simulated: `import verl` fails), --help and a real run import none of it."""
    code = f"""
import sys
sys.modules["verl"] = None  # import verl -> ImportError, as on a machine without veRL
from agentgrpo.cli import main
try:
    main(["verl-prepare", "--help"])
except SystemExit as e:
    assert e.code == 0, e.code
rc = main(["verl-prepare", "--out", {str(tmp_path)!r}, "n_tasks=6", "splits.covered_seen=2",
           "splits.uncovered_seen=2", "splits.unseen=2"])
assert rc == 0, rc
loaded = [m for m, module in sys.modules.items() if module is not None and m.split(".")[0] == "verl"]
assert not loaded, loaded
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "write train/val/test parquet files" in result.stdout.lower()  # the --help text
    assert (tmp_path / "train.parquet").is_file() and (tmp_path / "manifest.json").is_file()
