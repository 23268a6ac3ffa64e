"""What an evaluation ran: ``eval.json``'s ``provenance`` block.

An evaluation is only comparable with another when both say what they evaluated and with
what: the policy (a checkpoint path, or the served model and its base URL), the user (the
scripted simulator, or an LLM user's model and base URL), the agentgrpo version and git
commit, the versions of the libraries that decide the numbers, the date, and the resolved
config. ``check_out_dir`` refuses a non-empty output directory unless the evaluation
resumes it or is forced (``--force`` clears the evaluation files it would overwrite).
"""
from __future__ import annotations

import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from agentgrpo.config import ConfigError, to_dict
from agentgrpo.eval.config import EvalConfig

PACKAGES = ("agentgrpo", "torch", "transformers", "numpy")
"""Libraries whose versions are recorded (None where one is not installed)."""
OUTPUT_FILES = ("eval.json", "eval.md", "transcripts.jsonl", "eval_config.yaml", "compare.json", "compare.md",
                "tau_bench_results.json", "writes.json", "writes.md")
"""Files an evaluation (or ``eval --writes`` after it) writes into its out_dir."""
PACKAGE_DIR = Path(__file__).resolve().parents[1]


def provenance(config: EvalConfig) -> dict[str, Any]:
    """The provenance block of an evaluation of ``config`` (JSON-ready)."""
    from agentgrpo import __version__

    return {
        "policy": policy_description(config),
        "user": user_description(config),
        "agentgrpo_version": __version__,
        "git_commit": git_commit(),
        "packages": {name: package_version(name) for name in PACKAGES},
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config": to_dict(config),
    }


def policy_description(config: EvalConfig) -> dict[str, Any]:
    """``kind`` (checkpoint / oracle / openai) and what identifies it: a resolved path or a
    Hub id; for an endpoint, the model name and base URL."""
    kind = config.policy_kind
    if kind == "openai":
        return {"kind": kind, "model": config.endpoint.model, "base_url": config.endpoint.base_url}
    if kind == "oracle":
        return {"kind": kind}
    path = Path(config.policy.init)
    located = str(path.resolve()) if path.exists() else None
    return {"kind": kind, "path": located, "hub_id": None if located else config.policy.init}


def user_description(config: EvalConfig) -> dict[str, Any]:
    """The simulated user: ``scripted``, or an LLM user's model, base URL and temperature."""
    user = config.env.user
    if user.kind == "scripted":
        return {"kind": "scripted"}
    return {"kind": user.kind, "model": user.model, "base_url": user.base_url,
            "temperature": config.env.user_temperature}


def git_commit(directory: Path = PACKAGE_DIR) -> str | None:
    """The commit of the git checkout holding ``directory`` (+ ``-dirty`` with uncommitted
    changes to tracked files); None outside a checkout or without git."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=directory, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit or git("ls-files", "--error-unmatch", "__init__.py") is None:  # not this package's checkout
        return None
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return f"{commit}-dirty" if dirty else commit


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def check_out_dir(out_dir: str | Path, resume: bool = False, force: bool = False) -> None:
    """Refuse to evaluate into a directory that already holds files, unless ``resume``
    (finish the evaluation there) or ``force`` (its evaluation files are removed first)."""
    out = Path(out_dir)
    if resume or not out.exists():
        return
    if not out.is_dir():
        raise ConfigError(f"out_dir {out} is a file; pass --out a directory")
    if force:
        for name in OUTPUT_FILES:
            (out / name).unlink(missing_ok=True)
        return
    held = sorted(p.name for p in out.iterdir())
    if held:
        shown = ", ".join(held[:4]) + (", ..." if len(held) > 4 else "")
        raise ConfigError(f"out_dir {out} already exists and holds {shown}; pass --resume to finish the evaluation "
                          "there, --force to overwrite it, or --out a new directory")
