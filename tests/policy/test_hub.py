"""Hub ids resolve through a local Hugging Face cache, offline; an uncached id fails in one line."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from agentgrpo.cli import main
from agentgrpo.config import MissingFileError
from agentgrpo.policy.hf import load_policy, read_agent_config
from agentgrpo.policy.hub import looks_like_hub_id, resolve_source
from agentgrpo.policy.preflight import check_policy_source
from agentgrpo.policy.source import PolicySource, resolve_policy_source

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch, tiny_policy_dir):
    """$HF_HOME/hub laid out as the Hub client writes it, holding the tiny policy as ``agentgrpo-test/tiny``."""
    repo = tmp_path / "hf" / "hub" / "models--agentgrpo-test--tiny"
    shutil.copytree(tiny_policy_dir, repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return repo


def test_a_hub_id_loads_from_the_local_cache_offline(hub_cache, tiny_policy_dir):
    assert looks_like_hub_id("agentgrpo-test/tiny") and not looks_like_hub_id(str(tiny_policy_dir))
    assert resolve_source("agentgrpo-test/tiny") == str(hub_cache / "snapshots" / COMMIT)
    model, tokenizer = load_policy("agentgrpo-test/tiny")
    reference, _ = load_policy(tiny_policy_dir)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), reference.state_dict().values()))
    assert tokenizer.chat_template
    assert read_agent_config("agentgrpo-test/tiny") == {"prompt_style": "compact"}
    check_policy_source("agentgrpo-test/tiny", "policy", "hint")  # preflight accepts it too


def test_an_uncached_id_offline_is_one_line(hub_cache, capsys, tmp_path, monkeypatch):
    with pytest.raises(MissingFileError, match="HF_HUB_OFFLINE=1 forbids downloading"):
        load_policy("agentgrpo-test/absent")
    monkeypatch.chdir(tmp_path)
    code = main(["eval", "--policy", "agentgrpo-test/absent", "trials=1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "agentgrpo-test/absent" in err[0] and "not in the Hugging Face cache" in err[0]


def test_a_source_is_resolved_once_into_its_kind(hub_cache, tiny_policy_dir, tmp_path, monkeypatch):
    from agentgrpo.policy import source as source_module

    snapshot = hub_cache / "snapshots" / COMMIT
    assert resolve_policy_source("agentgrpo-test/tiny") == PolicySource("agentgrpo-test/tiny", "checkpoint", snapshot)
    assert resolve_policy_source(tiny_policy_dir).kind == "checkpoint"
    assert resolve_policy_source("tiny") == PolicySource("tiny", "built")
    assert resolve_policy_source("runs/x.gguf") == PolicySource("runs/x.gguf", "gguf", Path("runs/x.gguf"))
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    assert resolve_policy_source(adapter).kind == "adapter"
    with pytest.raises(MissingFileError, match="has no config.json"):
        resolve_policy_source(tmp_path)
    with pytest.raises(MissingFileError, match="no checkpoint directory or .gguf file"):
        resolve_policy_source(tmp_path / "absent")

    looked_up: list[str] = []
    real = source_module.resolve_source
    monkeypatch.setattr(source_module, "resolve_source", lambda name, key: looked_up.append(name) or real(name, key))
    load_policy("agentgrpo-test/tiny")
    assert looked_up == ["agentgrpo-test/tiny"]  # one resolution, then the load
