"""Metrics logging: JSONL always, TensorBoard / W&B / SwanLab when asked.

One small interface (``log(metrics, step)``, ``close()``); every backend is optional,
imported only when selected, and offline-safe (W&B and SwanLab run in offline mode
unless the user configured otherwise through their own environment variables).
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Protocol

from agentgrpo.config import require

TRACKERS = ("jsonl", "tensorboard", "wandb", "swanlab")
"""Backend names a config may list (JSONL is always written; naming it is harmless)."""


def check_trackers(names: list[str], key: str) -> None:
    """A config check (``__post_init__``): every name is one of ``TRACKERS``."""
    unknown = [name for name in names if name not in TRACKERS]
    require(not unknown, key, names, f"each must be one of {list(TRACKERS)}")


class Tracker(Protocol):
    def log(self, metrics: dict[str, float], step: int) -> None: ...
    def close(self) -> None: ...


class JsonlTracker:
    """Appends one JSON object per step to ``metrics.jsonl``; resumable."""

    def __init__(self, path: str | Path, resume_from_step: int | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_from_step is not None:
            self._truncate_after(resume_from_step)
        elif self.path.exists():
            self.path.unlink()
        self._file = open(self.path, "a")

    def _truncate_after(self, step: int) -> None:
        """A resumed run rewrites the steps after its checkpoint: drop them from the log."""
        if not self.path.exists():
            return
        kept = []
        for line in self.path.read_text().splitlines():
            try:
                if json.loads(line).get("step", -1) <= step:
                    kept.append(line)
            except json.JSONDecodeError:  # a line cut by a kill
                continue
        self.path.write_text("".join(k + "\n" for k in kept))

    def log(self, metrics: dict[str, float], step: int) -> None:
        record = {"step": step, **{k: _clean(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class TensorBoardTracker:
    def __init__(self, log_dir: str | Path):
        from torch.utils.tensorboard import SummaryWriter  # needs `pip install tensorboard`

        self._writer = SummaryWriter(str(log_dir))

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and math.isfinite(value):
                self._writer.add_scalar(key, value, step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class WandbTracker:
    def __init__(self, project: str, run_name: str, run_dir: str | Path, config: dict[str, Any]):
        import wandb

        os.environ.setdefault("WANDB_MODE", "offline")
        self._run = wandb.init(project=project, name=run_name, dir=str(run_dir), config=config)

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._run.log(metrics, step=step)

    def close(self) -> None:
        self._run.finish()


class SwanLabTracker:
    def __init__(self, project: str, run_name: str, run_dir: str | Path, config: dict[str, Any]):
        import swanlab

        os.environ.setdefault("SWANLAB_MODE", "offline")
        self._run = swanlab.init(project=project, experiment_name=run_name, logdir=str(run_dir), config=config)

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._run.log(metrics, step=step)

    def close(self) -> None:
        self._run.finish()


class MultiTracker:
    """Fans out to every configured backend."""

    def __init__(self, trackers: list[Tracker]):
        self.trackers = trackers

    def log(self, metrics: dict[str, float], step: int) -> None:
        for tracker in self.trackers:
            tracker.log(metrics, step)

    def close(self) -> None:
        for tracker in self.trackers:
            tracker.close()


def make_tracker(
    run_dir: str | Path,
    backends: list[str],
    *,
    run_name: str,
    config: dict[str, Any],
    project: str = "agentgrpo",
    resume_from_step: int | None = None,
) -> MultiTracker:
    """JSONL in ``run_dir/metrics.jsonl`` plus ``backends`` (tensorboard, wandb, swanlab)."""
    run_dir = Path(run_dir)
    trackers: list[Tracker] = [JsonlTracker(run_dir / "metrics.jsonl", resume_from_step)]
    for name in backends:
        if name == "tensorboard":
            trackers.append(TensorBoardTracker(run_dir / "tensorboard"))
        elif name == "wandb":
            trackers.append(WandbTracker(project, run_name, run_dir, config))
        elif name == "swanlab":
            trackers.append(SwanLabTracker(project, run_name, run_dir, config))
        elif name != "jsonl":
            raise ValueError(f"unknown tracker {name!r}; choose from {list(TRACKERS)}")
    return MultiTracker(trackers)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` (skipping a last line cut by a kill)."""
    records = []
    for line in Path(path).read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def _clean(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
