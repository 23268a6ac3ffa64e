"""Metrics logging: JSONL always, TensorBoard / W&B / SwanLab when asked.

One small interface (``log(metrics, step)``, ``close()``); every backend is optional and
imported only when selected. ``sft``, ``train``, ``eval`` and ``ablate`` all take the same
``logging.trackers`` / ``logging.project`` keys (:class:`TrackingConfig`).

W&B behaves as its users expect: online when the user is logged in (``wandb login``'s
netrc entry or ``WANDB_API_KEY``), offline otherwise (``wandb sync`` uploads later), and
``WANDB_MODE`` always wins. A run is named by its caller (``joint-seed1``, grouped by
experiment); its W&B id is kept in ``RUN_DIR/tracking.json`` so a resumed run continues the
same W&B run. SwanLab runs offline unless ``SWANLAB_MODE`` says otherwise.
"""
from __future__ import annotations

import json
import math
import netrc
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from agentgrpo.config import require

TRACKERS = ("jsonl", "tensorboard", "wandb", "swanlab")
"""Backend names a config may list (JSONL is always written; naming it is harmless)."""

TRACKING_FILE = "tracking.json"
"""In a run directory: the ids of its tracker runs (``{"wandb_run_id": ...}``), for resuming."""


def check_trackers(names: list[str], key: str) -> None:
    """A config check (``__post_init__``): every name is one of ``TRACKERS``."""
    unknown = [name for name in names if name not in TRACKERS]
    require(not unknown, key, names, f"each must be one of {list(TRACKERS)}")


@dataclass
class TrackingConfig:
    """The ``logging`` section of sft, train and eval configs."""

    trackers: list[str] = field(default_factory=list)
    """Metric backends besides the run's JSONL: tensorboard, wandb (online when logged in), swanlab."""
    project: str = "agentgrpo"
    """The W&B / SwanLab project."""

    def __post_init__(self) -> None:
        check_trackers(self.trackers, "logging.trackers")


def wandb_logged_in(environ: dict[str, str] | None = None) -> bool:
    """Whether W&B has credentials here: ``WANDB_API_KEY``, or a netrc entry for its host (``wandb login``)."""
    environ = os.environ if environ is None else environ
    if environ.get("WANDB_API_KEY"):
        return True
    host = urlsplit(environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").netloc
    path = environ.get("NETRC") or str(Path.home() / ".netrc")
    try:
        entry = netrc.netrc(path).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return False
    return bool(entry and entry[2])


def wandb_mode(environ: dict[str, str] | None = None) -> str:
    """``WANDB_MODE`` if set, else ``online`` when logged in and ``offline`` when not."""
    environ = os.environ if environ is None else environ
    if environ.get("WANDB_MODE"):
        return environ["WANDB_MODE"]
    return "online" if wandb_logged_in(environ) else "offline"


def _read_ids(run_dir: Path) -> dict[str, str]:
    try:
        ids = json.loads((run_dir / TRACKING_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return ids if isinstance(ids, dict) else {}


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
    """A W&B run in ``run_dir/wandb``; ``resume``: continue the run whose id ``tracking.json`` holds."""

    def __init__(self, project: str, run_name: str, run_dir: str | Path, config: dict[str, Any],
                 group: str | None = None, resume: bool = False):
        import wandb

        run_dir = Path(run_dir)
        ids = _read_ids(run_dir)
        run_id = ids.get("wandb_run_id") if resume else None
        self.mode = wandb_mode()
        if self.mode == "offline" and not os.environ.get("WANDB_MODE"):
            print(f"wandb: not logged in, logging offline to {run_dir / 'wandb'} (wandb login, or wandb sync "
                  "that directory later)", file=sys.stderr)
        self._run = wandb.init(project=project, name=run_name, group=group, dir=str(run_dir), config=config,
                               mode=self.mode, id=run_id,
                               resume="allow" if run_id else None)
        self.run_id = self._run.id
        (run_dir / TRACKING_FILE).write_text(json.dumps({**ids, "wandb_run_id": self.run_id}, indent=2) + "\n")

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
    group: str | None = None,
    resume_from_step: int | None = None,
    jsonl: bool = True,
) -> MultiTracker:
    """JSONL in ``run_dir/metrics.jsonl`` (unless ``jsonl=False``) plus ``backends`` (tensorboard, wandb, swanlab).

    ``run_name``: the run's name in W&B / SwanLab (say the experiment and seed); ``group``:
    runs shown together (e.g. the seeds of one experiment); ``resume_from_step``: a resumed
    run, whose JSONL is cut after that step and whose W&B run continues.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    trackers: list[Tracker] = [JsonlTracker(run_dir / "metrics.jsonl", resume_from_step)] if jsonl else []
    for name in backends:
        if name == "tensorboard":
            trackers.append(TensorBoardTracker(run_dir / "tensorboard"))
        elif name == "wandb":
            trackers.append(WandbTracker(project, run_name, run_dir, config, group=group,
                                         resume=resume_from_step is not None))
        elif name == "swanlab":
            trackers.append(SwanLabTracker(project, run_name, run_dir, config))
        elif name != "jsonl":
            raise ValueError(f"unknown tracker {name!r}; choose from {list(TRACKERS)}")
    return MultiTracker(trackers)


def log_summary(out_dir: str | Path, logging: TrackingConfig, metrics: dict[str, float], *, run_name: str,
                config: dict[str, Any], group: str | None = None) -> None:
    """One record of summary figures (an evaluation's) to ``logging.trackers``, without a JSONL of its own."""
    if not [name for name in logging.trackers if name != "jsonl"]:
        return
    tracker = make_tracker(out_dir, logging.trackers, run_name=run_name, config=config, project=logging.project,
                           group=group, jsonl=False)
    try:
        tracker.log(metrics, step=0)
    finally:
        tracker.close()


def flat_numbers(data: Any, prefix: str = "") -> dict[str, float]:
    """The finite numbers of a nested summary as ``{"a/b/c": x}`` (lists by index), for a tracker's ``log``."""
    if isinstance(data, bool) or data is None:
        return {}
    if isinstance(data, (int, float)):
        return {prefix.rstrip("/"): float(data)} if math.isfinite(data) else {}
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    flat: dict[str, float] = {}
    for key, value in items:
        flat.update(flat_numbers(value, f"{prefix}{key}/"))
    return flat


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
