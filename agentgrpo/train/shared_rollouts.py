"""Rollouts shared between runs that sample them alike (``trainer.shared_rollouts_dir``).

Before its first optimizer step a run's policy is its ``policy.init``, and every rollout is
seeded by ``(seed, step, round, task, sample)`` alone, so runs that differ only in what they
do *with* the rollouts (the advantage estimator, PRM-Lite's coefficient, LLDS, the learning
rate: an ablation's variants of one seed) sample the same first episodes, token for token.
The first such run to reach them stores them here; the others read them instead of decoding
them again. A rollout is keyed by everything it depends on (the policy's files and settings,
the env and rollout settings, the seed, group size, step, generation round and the tasks
drawn, torch's version and thread count), so a run that would sample differently never
reads another's episodes. The entries are stored before any scoring, so each run scores
them with its own reward settings.

Entries are pickles (a trajectory's turns point into its steps, which pickle keeps): only
point this at a directory your own runs write. A lock per entry makes a second run that
arrives while the first is still sampling wait for its episodes instead of sampling them too.
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agentgrpo.agent.types import Trajectory

FORMAT = 1
"""Bumped when what an entry holds changes, so older entries are never read."""


def digest_files(path: str | Path) -> str:
    """sha256 over a file, or over every file under a directory (relative paths and bytes):
    what identifies a checkpoint's weights and tokenizer. A name that is not on disk (a
    preset built from its config) is its own identity."""
    path = Path(path)
    hasher = hashlib.sha256()
    if path.is_file():
        files = [(path.name, path)]
    elif path.is_dir():
        files = sorted((str(f.relative_to(path)), f) for f in path.rglob("*") if f.is_file())
    else:
        return f"name:{path}"
    for name, file in files:
        hasher.update(name.encode() + b"\0")
        with file.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                hasher.update(chunk)
        hasher.update(b"\0")
    return hasher.hexdigest()


class SharedRollouts:
    """A directory of rollouts keyed by ``identity`` (what every rollout of the run depends on)
    plus each call's own parts (step, round, tasks)."""

    def __init__(self, directory: str | Path, identity: dict[str, Any]):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.identity = {"format": FORMAT, **identity}

    def key(self, **parts: Any) -> str:
        text = json.dumps({**self.identity, **parts}, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def get_or_sample(self, sample: Callable[[], list[Trajectory]], **parts: Any
                      ) -> tuple[list[Trajectory], bool]:
        """The stored rollouts for ``parts``, or ``sample()``'s, stored for the next run.
        Returns them and whether they were read."""
        key = self.key(**parts)
        entry = self.directory / f"{key}.pkl"
        with _locked(self.directory / f"{key}.lock"):
            if entry.is_file():
                with entry.open("rb") as handle:
                    return pickle.load(handle), True
            trajectories = sample()
            partial = entry.with_suffix(f".tmp{os.getpid()}")
            with partial.open("wb") as handle:
                pickle.dump(trajectories, handle, protocol=pickle.HIGHEST_PROTOCOL)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(partial, entry)  # a killed run leaves no half-written entry
            return trajectories, False


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # not POSIX: two runs arriving at once both sample, and store the same bits
        yield
        return
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
