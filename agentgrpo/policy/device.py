"""Device placement and mixed precision for the policy (``policy.device``, ``dtype``, ``autocast``).

``resolve_device("auto")`` is the first CUDA device when there is one, else the CPU; a
device that is asked for but absent is a one-line ``ConfigError``. ``autocast(device)``
runs forward passes under bfloat16 autocast on CUDA (float32 parameters, bfloat16
matmuls: the usual mixed precision of RL fine-tuning), and on the CPU when asked
(``policy.cpu_autocast``).
"""
from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator
from typing import Any

import torch

from agentgrpo.config import ConfigError


def resolve_device(name: str = "auto", key: str = "policy.device") -> torch.device:
    """The torch device for ``name`` (auto, cpu, cuda, cuda:N, mps), checked against the machine."""
    if name == "auto":
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"{key}={name}: this machine has no CUDA device (or this torch build has no CUDA "
                              f"support); set {key}=cpu or auto")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"{key}={name}: only {torch.cuda.device_count()} CUDA device(s) here")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"{key}={name}: MPS is not available here; set {key}=cpu or auto")
    return device


def model_device(model: torch.nn.Module) -> torch.device:
    """Where the model's parameters live."""
    return next(model.parameters()).device


AutocastOn = bool | Collection[str]
"""Where forward passes run under bfloat16 autocast: device types (``PolicySource.autocast_devices``),
or a bool: True is CUDA only (the usual mixed precision), False nowhere."""


def autocast_enabled(device: torch.device, on: AutocastOn = True) -> bool:
    """Whether passes on ``device`` run under bfloat16 autocast (``on``: see ``AutocastOn``)."""
    devices = ("cuda",) if on is True else () if on is False else tuple(on)
    return device.type in devices and device.type in ("cuda", "cpu")


@contextlib.contextmanager
def autocast(device: torch.device, on: AutocastOn = True) -> Iterator[None]:
    """bfloat16 autocast on ``device`` when ``on`` names its type (``True``: CUDA only); else a no-op.

    On the CPU it pays where the CPU computes bfloat16 natively (AVX512-BF16, AMX)."""
    if autocast_enabled(device, on):
        with torch.autocast(device.type, dtype=torch.bfloat16):
            yield
    else:
        yield


def place(model: Any, device: torch.device) -> Any:
    """Move a model to ``device`` (a no-op when it is there already)."""
    return model if model_device(model) == device else model.to(device)


def enable_gradient_checkpointing(model: Any) -> None:
    """Recompute activations in the backward pass (non-reentrant: works with frozen inputs and LoRA)."""
    target = model.get_base_model() if hasattr(model, "get_base_model") else model
    target.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
