"""Atomic, self-describing training checkpoints (safetensors + JSON).

A checkpoint is a directory ``<run>/checkpoints/step_000010/`` holding the model and
tokenizer in HF format (``model/``), the optimizer state flattened into
``optimizer.safetensors`` + ``optimizer.json``, RNG states, and
``trainer_state.json`` (step, resolved config, anything the trainer needs to resume).
It is written to a temporary sibling and renamed into place, so a run killed at any
moment leaves either the previous checkpoint or the new one, never half of one.
"""
from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from agentgrpo.policy.hf import write_model_files

STEP_PREFIX = "step_"


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
    """Write ``checkpoints/step_<step, 6 digits>`` atomically and return its path."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / checkpoint_name(step)
    tmp = root / f".{checkpoint_name(step)}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    write_model_files(model, tokenizer, tmp / "model", agent_config)
    if optimizer is not None:
        tensors, meta = _flatten_optimizer(optimizer)
        save_file(tensors, str(tmp / "optimizer.safetensors"))
        meta["scheduler"] = scheduler.state_dict() if scheduler is not None else None
        _write_json(tmp / "optimizer.json", meta)
    save_file({"torch": torch.get_rng_state()}, str(tmp / "rng.safetensors"))
    _write_json(tmp / "rng.json", {"python": _jsonable(random.getstate())})
    _write_json(tmp / "trainer_state.json", {"step": step, **trainer_state})
    _fsync_dir(tmp)
    if final.exists():  # re-saving the same step (e.g. after a resume): replace it
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(root)
    if keep_last:
        for old in list_checkpoints(run_dir)[:-keep_last]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first (temporary directories are ignored)."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(STEP_PREFIX)]
    return sorted(found, key=lambda p: int(p.name[len(STEP_PREFIX) :]))


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
    torch.set_rng_state(load_file(str(checkpoint / "rng.safetensors"))["torch"])
    python_state = json.loads((checkpoint / "rng.json").read_text())["python"]
    random.setstate(_tuplify(python_state))


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
