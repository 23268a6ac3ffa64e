"""The ``policy`` section of the SFT, GRPO and evaluation configs: which model, on which
device, in which precision, with which memory savers and adapters.

* ``init``: a checkpoint directory (full weights or a LoRA adapter), a Hub id such as
  ``Qwen/Qwen2.5-0.5B-Instruct`` (resolved through the local Hugging Face cache), a
  ``.gguf`` file or a preset. ``policy=X`` on the command line is short for
  ``policy.init=X`` (``SHORTHAND``).
* ``device``: ``auto`` is the first CUDA device when there is one, else the CPU.
* ``dtype`` / ``autocast`` / ``cpu_autocast``: parameters in float32 (exact optimizer
  updates) with the forward passes under bfloat16 autocast on CUDA (and, if asked, on the
  CPU, or ``auto``: where it computes bfloat16 natively), or parameters in bfloat16 (half the
  memory, for 7B on one card).
* ``gradient_checkpointing``: recompute activations in the backward pass (training only).
* ``lora``: train low-rank adapters (``peft``) instead of every weight; ``rank: 0`` is off.

No torch here: configs are built and checked before any model.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from agentgrpo.config import require

DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The attention and MLP projections of Llama, Qwen2, Mistral and SmolLM2 blocks."""
DEVICE_NAMES = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")
NATIVE_BFLOAT16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})
"""CPU features that compute bfloat16 in hardware, as Linux's /proc/cpuinfo names them: x86's
AVX512-BF16 and AMX (``flags``), Arm's BF16 extension (``Features``)."""


def native_bfloat16_flags(cpuinfo: str | None = None) -> list[str]:
    """The ``NATIVE_BFLOAT16_FLAGS`` that ``cpuinfo`` (the text of /proc/cpuinfo; this machine's when
    None) lists, sorted; empty without them or where there is no /proc/cpuinfo (macOS, Windows)."""
    if cpuinfo is None:
        return list(_this_machines_flags())
    found: set[str] = set()
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip().lower() in ("flags", "features"):
            found |= NATIVE_BFLOAT16_FLAGS & set(value.split())
    return sorted(found)


def cpu_computes_bfloat16(cpuinfo: str | None = None) -> bool:
    """Whether the CPU has bfloat16 arithmetic in hardware (``native_bfloat16_flags``). Without it a
    bfloat16 pass is emulated, several times slower than float32 (about 11x a training step on an
    AMD EPYC without AVX512). False where nothing says so."""
    return bool(native_bfloat16_flags(cpuinfo))


@functools.cache
def _this_machines_flags() -> tuple[str, ...]:
    try:
        return tuple(native_bfloat16_flags(Path("/proc/cpuinfo").read_text()))
    except OSError:
        return ()


@dataclass
class LoraConfig:
    rank: int = 0
    """LoRA rank r of each adapter (0 = no LoRA: every weight is trained). 8-64 is usual."""
    alpha: float = 32.0
    """LoRA scale numerator: an adapter adds (alpha / rank) · B·A to its weight."""
    dropout: float = 0.05
    """Dropout on the adapters' input during training, in [0, 1)."""
    target_modules: list[str] = field(default_factory=lambda: list(DEFAULT_LORA_TARGETS))
    """Names (last path component) of the linear layers that get adapters."""

    def __post_init__(self) -> None:
        require(self.rank >= 0, "policy.lora.rank", self.rank, "must be >= 0 (0 turns LoRA off)")
        require(self.alpha > 0, "policy.lora.alpha", self.alpha, "must be > 0")
        require(0 <= self.dropout < 1, "policy.lora.dropout", self.dropout, "must be in [0, 1)")
        require(bool(self.target_modules), "policy.lora.target_modules", self.target_modules,
                "must name at least one module, e.g. [q_proj, v_proj]")

    @property
    def enabled(self) -> bool:
        return self.rank > 0


@dataclass
class PolicySource:
    """Which model and where it runs (the evaluator's policy; the base of the training ones)."""

    init: str = ""
    """The model: a checkpoint directory, a Hub id, a .gguf file or a preset name."""
    device: str = "auto"
    """cpu, cuda, cuda:N, mps, or auto (CUDA when present, else CPU)."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Parameter dtype: float32 (exact updates; on CUDA the forward passes still run in
    bfloat16 under ``autocast``) or bfloat16 (half the memory)."""
    autocast: bool = True
    """On CUDA, run forward passes under bfloat16 autocast (no effect on CPU or with bfloat16 weights)."""
    cpu_autocast: bool | Literal["auto"] = False
    """On the CPU, run forward passes under bfloat16 autocast too (float32 weights and updates):
    2-3x faster on CPUs with native bfloat16 (AVX512-BF16, AMX), ~10x slower on others; ``auto``
    turns it on only where the CPU has it (``cpu_computes_bfloat16``). Off by default because it
    changes the float32 results (benchmarks/cpu_bf16.py measures both)."""

    SHORTHAND: ClassVar[str] = "init"
    """``policy=X`` in an override or a YAML file means ``policy.init=X``."""

    def __post_init__(self) -> None:
        require(bool(DEVICE_NAMES.match(self.device)), "policy.device", self.device,
                "must be auto, cpu, cuda, cuda:N or mps")

    @property
    def autocast_devices(self) -> tuple[str, ...]:
        """The device types whose forward passes run under bfloat16 autocast."""
        cpu = self.cpu_autocast is True or (self.cpu_autocast == "auto" and cpu_computes_bfloat16())
        return (("cuda",) if self.autocast else ()) + (("cpu",) if cpu else ())


@dataclass
class PolicyConfig(PolicySource):
    """A policy that is trained (GRPO; SFT's subclass below)."""

    init: str = "runs/sft/final"
    """Where the policy starts: a checkpoint directory (an SFT run's ``final``), a LoRA
    adapter directory, a Hub id, a .gguf file or a pretrained preset."""
    gradient_checkpointing: bool = False
    """Recompute each block's activations in the backward pass: much less memory, ~30% more time."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """Low-rank adapters instead of full fine-tuning (``lora.rank > 0``); saved as a PEFT adapter."""


@dataclass
class SFTPolicyConfig(PolicyConfig):
    init: str = "tiny"
    """A built preset (tiny, small: tokenizer trained on domain text, random init), a
    checkpoint directory, a Hub id, a .gguf file or smollm2-135m."""


@dataclass
class EvalPolicyConfig(PolicySource):
    init: str = "oracle"
    """What is evaluated: a checkpoint directory (full or LoRA adapter), a Hub id, a .gguf
    file, ``oracle`` (the teacher) or ``openai`` (a served model: see ``endpoint``)."""
