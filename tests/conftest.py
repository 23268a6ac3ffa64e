"""Shared test fixtures: where the τ-bench airline data lives, and torch threads."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def find_tau_bench_dir() -> Path | None:
    """τ-bench data is never copied into the project: it is read from shared/."""
    candidates = [
        os.environ.get("AGENTGRPO_TAU_BENCH_DIR"),
        REPO_ROOT.parent / "shared" / "tau_bench_airline",
        REPO_ROOT / "shared" / "tau_bench_airline",
    ]
    for c in candidates:
        if c and (Path(c) / "flights.json").is_file():
            return Path(c)
    return None


TAU_BENCH_DIR = find_tau_bench_dir()


@pytest.fixture(scope="session")
def tau_bench_dir() -> Path:
    if TAU_BENCH_DIR is None:
        pytest.fail(
            "τ-bench airline data not found: set AGENTGRPO_TAU_BENCH_DIR or place it at "
            "../shared/tau_bench_airline next to the repository"
        )
    return TAU_BENCH_DIR
