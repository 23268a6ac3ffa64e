"""A resumed evaluation must score the same episodes the same way: other settings are refused."""
from __future__ import annotations

import pytest
import yaml

from agentgrpo.config import ConfigError
from agentgrpo.eval.runner import CONFIG_FILE, _check_resume_config

SAVED = {"out_dir": "runs/a", "seed": 0, "concurrency": 4, "endpoint": {"model": "m", "request": {"timeout": 5.0}},
         "policy": {"init": "openai", "device": "cpu"}}


def test_how_episodes_are_played_may_change_on_resume(tmp_path):
    (tmp_path / CONFIG_FILE).write_text(yaml.safe_dump(SAVED))
    played_otherwise = {**SAVED, "out_dir": "runs/b", "concurrency": 1, "endpoint": {"model": "m", "request": {
        "timeout": 60.0, "max_retries": 9}}, "policy": {"init": "openai", "device": "cuda"}}
    _check_resume_config(tmp_path / CONFIG_FILE, played_otherwise, {})
    _check_resume_config(tmp_path / "missing" / CONFIG_FILE, {"seed": 1}, {})  # nothing saved: a fresh run


def test_what_is_scored_may_not_change_on_resume(tmp_path):
    (tmp_path / CONFIG_FILE).write_text(yaml.safe_dump(SAVED))
    scored_otherwise = {**SAVED, "seed": 1, "endpoint": {"model": "other", "request": {"timeout": 5.0}}}
    with pytest.raises(ConfigError, match=r"\(endpoint.model: 'm' -> 'other', seed: 0 -> 1\); resume with"):
        _check_resume_config(tmp_path / CONFIG_FILE, scored_otherwise, {})


def test_a_setting_added_since_resumes_at_its_default_only(tmp_path):
    """An evaluation saved before ``env.oracle_arithmetic`` existed resumes with it at its default
    (the code did that then), not with another value."""
    (tmp_path / CONFIG_FILE).write_text(yaml.safe_dump(SAVED))
    defaults = {"env": {"oracle_arithmetic": "stated"}}
    _check_resume_config(tmp_path / CONFIG_FILE, {**SAVED, "env": {"oracle_arithmetic": "stated"}}, defaults)
    with pytest.raises(ConfigError, match=r"env.oracle_arithmetic: <absent> -> 'calculator'"):
        _check_resume_config(tmp_path / CONFIG_FILE, {**SAVED, "env": {"oracle_arithmetic": "calculator"}}, defaults)
