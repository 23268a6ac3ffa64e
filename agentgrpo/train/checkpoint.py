"""Atomic, self-describing training checkpoints (safetensors + JSON).

A checkpoint is a directory ``<run>/checkpoints/step_000010/`` holding the model and
tokenizer in HF format (``model/``), the optimizer state flattened into
``optimizer.safetensors`` + ``optimizer.json``, RNG states (Python's; torch's, CPU and CUDA), and
``trainer_state.json`` (step, resolved config, anything the trainer needs to resume).
It is written to a temporary sibling, fsynced (files, then directories) and renamed into
place, so a run killed at any moment leaves either the previous checkpoint or the new
one, never half of one; what a killed save leaves behind is cleaned up by the next save
or resume (``remove_stale``).
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from agentgrpo.policy.hf import write_model_files

STEP_PREFIX = "step_"
_STEP_DIR = re.compile(rf"{STEP_PREFIX}\d+")
_TMP_MARK, _OLD_MARK, _DEL_MARK = ".tmp-", ".old-", ".del-"  # being written, replaced, pruned
_STALE = re.compile(rf"\.(?P<name>{STEP_PREFIX}\d+)(?P<kind>\.(?:tmp|old|del)-).+")


def checkpoint_name(step: int) -> str:
    return f"{STEP_PREFIX}{step:06d}"


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    model: torch.nn.Module,
    tokenizer: Any,
    optimizer: torch.optim.Optimizer | None,
    scheduler: Any | None,
    trainer_state: dict[str, Any],
    keep_last: int | None = None,
    agent_config: dict[str, Any] | None = None,
) -> Path:
    """Write ``checkpoints/step_<step, 6 digits>`` atomically and return its path.

    Every file is fsynced, then the directories; an existing checkpoint of the same step
    is moved aside, replaced by a rename and only then deleted. ``keep_last`` > 0 keeps
    that many newest checkpoints; 0 or None keeps all.
    """
    if keep_last is not None and keep_last < 0:
        raise ValueError(f"keep_last must be >= 0 (0 keeps every checkpoint), got {keep_last}")
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    remove_stale(run_dir)
    final = root / checkpoint_name(step)
    tmp = root / f".{checkpoint_name(step)}{_TMP_MARK}{os.getpid()}"
    try:
        tmp.mkdir()
        write_model_files(model, tokenizer, tmp / "model", agent_config)
        if optimizer is not None:
            tensors, meta = _flatten_optimizer(optimizer)
            save_file(tensors, str(tmp / "optimizer.safetensors"))
            meta["scheduler"] = scheduler.state_dict() if scheduler is not None else None
            _write_json(tmp / "optimizer.json", meta)
        save_file(_torch_rng_states(), str(tmp / "rng.safetensors"))
        _write_json(tmp / "rng.json", {"python": _jsonable(random.getstate())})
        _write_json(tmp / "trainer_state.json", {"step": step, **trainer_state})
        _fsync_tree(tmp)
        _replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if keep_last:
        for old in list_checkpoints(run_dir)[:-keep_last]:
            _remove(old, _DEL_MARK)
    return final


def _remove(checkpoint: Path, mark: str) -> None:
    """Delete a checkpoint, renaming it first so that a half-deleted one never looks complete."""
    doomed = checkpoint.parent / f".{checkpoint.name}{mark}{os.getpid()}"
    checkpoint.rename(doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def _replace(new: Path, final: Path) -> None:
    """Rename ``new`` to ``final``; an existing ``final`` is moved aside first, deleted last."""
    aside = final.parent / f".{final.name}{_OLD_MARK}{os.getpid()}"
    if final.exists():  # re-saving the same step (e.g. after a resume)
        final.rename(aside)
    try:
        new.rename(final)
    except OSError:
        if aside.exists():
            aside.rename(final)
        raise
    _fsync_dir(final.parent)
    shutil.rmtree(aside, ignore_errors=True)


def remove_stale(run_dir: str | Path) -> None:
    """Clean up after a run killed while saving.

    Temporary ``.step_*.tmp-*`` and pruned ``.step_*.del-*`` directories are deleted. A
    ``.step_*.old-*`` directory (a checkpoint moved aside while being re-saved) is put
    back when its step is missing (the kill came between the two renames), otherwise
    deleted.
    """
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return
    for path in sorted(root.iterdir()):
        match = _STALE.fullmatch(path.name)
        if match is None or not path.is_dir():
            continue
        final = root / match["name"]
        if match["kind"] == _OLD_MARK and not final.exists():
            path.rename(final)
        else:
            shutil.rmtree(path, ignore_errors=True)


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Checkpoints of a run, oldest first: only ``step_<digits>`` directories count
    (temporary directories and anything else under ``checkpoints/`` are ignored)."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and _STEP_DIR.fullmatch(p.name)]
    return sorted(found, key=lambda p: int(p.name[len(STEP_PREFIX) :]))


RFT_ROUNDS_DIR = "rft_rounds"
"""Where an SFT run keeps the SFTs of its earlier rejection-sampling rounds (``data.rft_rounds``)."""


def can_continue(run_dir: str | Path) -> bool:
    """Whether a killed run left a checkpoint to continue from (``--resume``): its own, or one of
    an earlier rejection-sampling round's SFT (``run_dir/rft_rounds/round<k>``)."""
    rounds = Path(run_dir) / RFT_ROUNDS_DIR
    return bool(list_checkpoints(run_dir)) or any(list_checkpoints(r) for r in sorted(rounds.glob("round*")))


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def load_trainer_state(checkpoint: Path) -> dict[str, Any]:
    return json.loads((checkpoint / "trainer_state.json").read_text())


def restore_training_state(checkpoint: Path, optimizer: torch.optim.Optimizer | None, scheduler: Any | None) -> None:
    """Load optimizer, scheduler and RNG states saved by ``save_checkpoint``."""
    if optimizer is not None and (checkpoint / "optimizer.safetensors").is_file():
        meta = json.loads((checkpoint / "optimizer.json").read_text())
        _unflatten_optimizer(optimizer, load_file(str(checkpoint / "optimizer.safetensors")), meta)
        if scheduler is not None and meta.get("scheduler") is not None:
            scheduler.load_state_dict(meta["scheduler"])
    rng = load_file(str(checkpoint / "rng.safetensors"))
    torch.set_rng_state(rng["torch"])
    if torch.cuda.is_available():
        for device in range(torch.cuda.device_count()):
            if f"cuda.{device}" in rng:
                torch.cuda.set_rng_state(rng[f"cuda.{device}"], device)
    python_state = json.loads((checkpoint / "rng.json").read_text())["python"]
    random.setstate(_tuplify(python_state))


def _torch_rng_states() -> dict[str, torch.Tensor]:
    """torch's CPU generator (``torch``) and, once CUDA is in use, each GPU's (``cuda.<index>``:
    dropout on a GPU draws from it)."""
    states = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states.update({f"cuda.{i}": state for i, state in enumerate(torch.cuda.get_rng_state_all())})
    return states


def _flatten_optimizer(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    state = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for param_id, param_state in state["state"].items():
        for key, value in param_state.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{param_id}.{key}"] = value.detach().contiguous().cpu()
            else:
                scalars.setdefault(str(param_id), {})[key] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def _unflatten_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict) -> None:
    per_param: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        param_id, key = name.split(".", 1)
        per_param.setdefault(int(param_id), {})[key] = value
    for param_id, values in meta["scalars"].items():
        per_param.setdefault(int(param_id), {}).update(values)
    optimizer.load_state_dict({"state": per_param, "param_groups": meta["param_groups"]})


def _write_json(path: Path, data: Any) -> None:
    with open(path, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())


def _fsync_tree(root: Path) -> None:
    """fsync every file under ``root``, then every directory, deepest first."""
    directories = [root]
    for path in sorted(root.rglob("*")):
        if path.is_dir():
            directories.append(path)
        else:
            with open(path, "rb") as f:
                os.fsync(f.fileno())
    for directory in sorted(directories, key=lambda p: len(p.parts), reverse=True):
        _fsync_dir(directory)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


def _tuplify(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_tuplify(v) for v in value)
    return value
