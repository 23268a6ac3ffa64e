"""Shared test fixtures: where the τ-bench airline data lives (and skipping without it), torch threads."""
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


# ---- τ-bench data --------------------------------------------------------------------------
# Tests that read τ-bench's airline files take the ``tau_bench_dir`` fixture (directly or through
# another fixture); collection marks them ``tau_bench`` and skips them, with TAU_BENCH_MISSING as the
# reason, where the data is absent. Every other test uses the generated world and runs everywhere.
# CI (.ci/run) sets AGENTGRPO_REQUIRE_TAU_BENCH=1: there a missing directory stops the session and a
# skipped τ-bench test fails it.
REQUIRE_TAU_BENCH = os.environ.get("AGENTGRPO_REQUIRE_TAU_BENCH", "") not in ("", "0")
TAU_BENCH_MISSING = (
    "τ-bench airline data not found: set AGENTGRPO_TAU_BENCH_DIR to a directory holding users.json, "
    "flights.json, reservations.json, policy.md and tasks_test.json (the airline data of the "
    "sierra-research/tau-bench repository, MIT), or place it at ../shared/tau_bench_airline"
)


def find_tau_bench_dir() -> Path | None:
    """τ-bench data is never copied into the project: it is read from $AGENTGRPO_TAU_BENCH_DIR or shared/."""
    from agentgrpo.envs.airline.core.tau_bench import missing_files

    candidates = [
        os.environ.get("AGENTGRPO_TAU_BENCH_DIR"),
        REPO_ROOT.parent / "shared" / "tau_bench_airline",
        REPO_ROOT / "shared" / "tau_bench_airline",
    ]
    for c in candidates:
        if c and Path(c).is_dir() and not missing_files(c):
            return Path(c).resolve()
    return None


TAU_BENCH_DIR = find_tau_bench_dir()
_skipped_tau_bench: list[str] = []


def pytest_sessionstart(session: pytest.Session) -> None:
    if REQUIRE_TAU_BENCH and TAU_BENCH_DIR is None:
        raise pytest.UsageError(f"AGENTGRPO_REQUIRE_TAU_BENCH=1, but {TAU_BENCH_MISSING}")


@pytest.hookimpl(tryfirst=True)  # before -m selection, so `-m tau_bench` / `-m "not tau_bench"` work
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason=TAU_BENCH_MISSING)
    for item in items:
        if "tau_bench_dir" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.tau_bench)
            if TAU_BENCH_DIR is None:
                item.add_marker(skip)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and "tau_bench" in report.keywords:
        _skipped_tau_bench.append(report.nodeid)


def pytest_terminal_summary(terminalreporter) -> None:
    if REQUIRE_TAU_BENCH and _skipped_tau_bench:
        terminalreporter.write_line(
            f"AGENTGRPO_REQUIRE_TAU_BENCH=1: {len(_skipped_tau_bench)} τ-bench test(s) were skipped, "
            f"e.g. {_skipped_tau_bench[0]}", red=True)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # the controller sees every worker's reports
    if REQUIRE_TAU_BENCH and not worker and _skipped_tau_bench and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def tau_bench_dir() -> Path:
    """τ-bench's airline data directory; tests taking it are marked ``tau_bench`` (see above)."""
    if TAU_BENCH_DIR is None:
        pytest.skip(TAU_BENCH_MISSING)
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
