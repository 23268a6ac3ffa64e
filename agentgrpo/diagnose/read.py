"""Reading a GRPO run for ``agentgrpo diagnose``: its metrics.jsonl as per-metric series, its
evaluation's pass^1, and the two noise-robust primitives every check uses (a centred
rolling median, the first run of consecutive steps)."""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgrpo.config import DataError, MissingFileError

METRICS_FILE = "metrics.jsonl"


class NotApplicable(Exception):
    """A check cannot run on this run's metrics (the message says why)."""


@dataclass
class RunLog:
    """What every check reads: the run directory, its per-step records (``load_records``) and the
    final policy's evaluation report, when one was given (else ``find_eval`` looks for it)."""

    path: Path
    records: list[dict[str, Any]]
    eval_json: Path | None = None


def load_records(run_dir: str | Path) -> list[dict[str, Any]]:
    """The run's per-step metrics, one dict per step in step order (a resumed run's repeated step:
    the last record). A line cut by a kill is skipped."""
    path = Path(run_dir)
    if not path.is_dir():
        raise MissingFileError(f"diagnose: run directory {path} does not exist (pass a GRPO run_dir)")
    metrics = path / METRICS_FILE
    if not metrics.is_file():
        raise MissingFileError(f"diagnose: {metrics} not found: {path} is not a GRPO run directory "
                               "(agentgrpo train writes metrics.jsonl into its run_dir)")
    try:
        text = metrics.read_text(errors="replace")
    except OSError as e:
        raise DataError(f"diagnose: cannot read {metrics}: {e}") from e
    by_step: dict[int, dict[str, Any]] = {}
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int):
            by_step[record["step"]] = record
    if not by_step:
        raise DataError(f"diagnose: {metrics} holds no step records (empty, or not agentgrpo's metrics.jsonl)")
    return [by_step[step] for step in sorted(by_step)]


@dataclass
class Series:
    """One metric over the steps that logged it; ``None`` marks a logged non-finite value."""

    name: str
    steps: list[int]
    values: list[float | None]

    def finite(self) -> list[float]:
        return [v for v in self.values if v is not None]


def series(records: list[dict[str, Any]], *names: str) -> Series:
    """The first of ``names`` the run logged with a finite value; NotApplicable if none."""
    for name in names:
        logged = [(r["step"], r[name]) for r in records if name in r]
        if any(isinstance(v, (int, float)) and math.isfinite(v) for _, v in logged):
            return Series(name, [s for s, _ in logged],
                          [float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None for _, v in logged])
    raise NotApplicable(f"{' / '.join(names)} not logged")


def smooth(values: list[float | None]) -> list[float | None]:
    """Centred rolling median of 3 (2 at the ends): a one-step outlier never moves it."""
    out: list[float | None] = []
    for i in range(len(values)):
        window = [v for v in values[max(0, i - 1) : i + 2] if v is not None]
        out.append(statistics.median(window) if window else None)
    return out


def first_run(flags: list[bool], length: int) -> tuple[int, int] | None:
    """``(start, run length)`` of the first run of at least ``length`` consecutive True flags."""
    start = None
    for i, flag in enumerate([*flags, False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            if i - start >= length:
                return start, i - start
            start = None
    return None


def find_eval(run_dir: Path) -> Path | None:
    """The evaluation of this run's final policy: ``RUN_DIR/eval/eval.json`` (``agentgrpo ablate``),
    ``RUN_DIR/eval.json``, or the sibling ``eval_<run name>/eval.json`` (``agentgrpo quickstart``)."""
    candidates = (run_dir / "eval", run_dir, run_dir.parent / f"eval_{run_dir.name}")
    for path in (directory / "eval.json" for directory in candidates):
        if path.is_file():
            return path
    return None


def _number(value: Any) -> float | None:
    """A finite number, else None."""
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def eval_pass1(eval_json: Path) -> tuple[float, str, int | None]:
    """``(pass^1, which figure, episodes)`` of the test tasks of an ``agentgrpo eval`` report.

    Tasks drawn from held-out worlds (``task_set.tasks_per_split`` > 0) are all test tasks: the
    overall pass^1. On the environment's own splits covered_seen / uncovered_seen are the
    trained tasks and ``unseen`` is the test split (the seed's 0.125): its pass^1. A report of
    the validation split alone has no test figure.
    """
    try:
        report = json.loads(eval_json.read_text())
        metrics = report["metrics"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise NotApplicable(f"{eval_json} is not an agentgrpo eval report ({e})") from None
    by_split = metrics.get("pass^1_by_split") or {}
    if set(by_split) == {"validation"}:
        raise NotApplicable(f"{eval_json} evaluates the validation split, not the test")
    trials = _number(report.get("trials"))
    unseen_tasks = _number((report.get("split_sizes") or {}).get("unseen"))
    heldout = (_number((report.get("task_set") or {}).get("tasks_per_split")) or 0) > 0
    if not heldout and _number(by_split.get("unseen")) is not None:
        episodes = int(unseen_tasks * trials) if unseen_tasks and trials else None
        return _number(by_split["unseen"]), "unseen pass^1", episodes
    overall = _number((metrics.get("pass^k") or {}).get("1"))
    if overall is None:
        raise NotApplicable(f"{eval_json} has no pass^1")
    episodes = metrics.get("episodes")
    return overall, "pass^1", episodes if isinstance(episodes, int) else None
