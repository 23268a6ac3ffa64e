"""Shared test fixtures: where the τ-bench airline data lives, and torch threads."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

REPO_ROOT = Path(__file__).resolve().parents[1]

# CI runs the property tests on a fixed example sequence (HYPOTHESIS_PROFILE=ci in .ci/run) so a
# submission is judged on reproducible inputs; locally they explore new random examples each run.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

if os.environ.get("PYTEST_XDIST_WORKER"):
    # one intra-op thread per xdist worker: two workers on two cores, no oversubscription
    import torch

    torch.set_num_threads(1)


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


@pytest.fixture(scope="session")
def tiny_policy_dir(tmp_path_factory) -> Path:
    """The tiny preset, built once per test session (random init, domain tokenizer, compact prompt).

    Shared by pytest-xdist workers through a lock in the common base temp directory.
    """
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    root = base.parent if base.name.startswith("popen-gw") else base  # xdist workers share the parent
    target = root / "tiny_policy"
    with FileLock(str(root / "tiny_policy.lock")):
        if not (target / "agentgrpo.json").is_file():
            from helpers import small_env_config

            from agentgrpo.envs.airline.factory import build_env
            from agentgrpo.policy.hf import build_policy
            from agentgrpo.policy.tokenizer import domain_corpus

            bundle = build_env(small_env_config())
            build_policy("tiny", domain_corpus(bundle.domain), target, seed=0,
                         agent_config={"prompt_style": "compact"})
    return target
