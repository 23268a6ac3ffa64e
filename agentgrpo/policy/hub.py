"""Hugging Face Hub ids as policies, resolved through the local Hugging Face cache.

``resolve_source("Qwen/Qwen2.5-0.5B-Instruct")`` returns the directory of that model's
snapshot in the cache (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
``~/.cache/huggingface/hub``), downloading it first only when the machine may go online:
with ``HF_HUB_OFFLINE=1`` an id that is not cached fails with one line saying so. A
local path (a checkpoint directory, a ``.gguf`` file) and a preset name pass through.
The environment is read at each call, so a job (or a test) may set it late.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from agentgrpo.config import MissingFileError

HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
SNAPSHOT_FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja", "*.tiktoken"]
"""What a download fetches of a repository: configs, weights, tokenizer files (no .bin, no ONNX)."""
_TRUE = {"1", "ON", "YES", "TRUE"}


def looks_like_hub_id(source: str) -> bool:
    """``org/name`` that is not a path on this machine (``runs/x`` that exists stays a path)."""
    return bool(HUB_ID.match(source)) and not Path(source).exists() and not source.endswith(".gguf")


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` forbids downloads (read now, not at import)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in _TRUE


def hub_cache_dir() -> Path:
    """The Hub cache directory the environment points at (read now, not at import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "huggingface" / "hub"


def resolve_hub_id(repo_id: str, key: str = "policy") -> Path:
    """The local snapshot directory of ``repo_id`` (cached, or downloaded when online)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    cache, offline = hub_cache_dir(), hub_offline()
    try:
        return Path(snapshot_download(repo_id, cache_dir=str(cache), local_files_only=offline,
                                      allow_patterns=SNAPSHOT_FILES))
    except LocalEntryNotFoundError:
        if offline:
            raise MissingFileError(
                f"{key}={repo_id}: no such local directory, and as a Hub id it is not in the Hugging Face cache "
                f"{cache} while HF_HUB_OFFLINE=1 forbids downloading it; download it where there is internet "
                f"(hf download {repo_id}) into that cache, or unset HF_HUB_OFFLINE") from None
        raise MissingFileError(f"{key}={repo_id}: no such local directory, and as a Hub id it is not in the Hugging "
                               f"Face cache {cache} and the Hub cannot be reached to download it; check the "
                               "connection or set HF_HUB_CACHE") from None
    except HFValidationError as e:
        raise MissingFileError(f"{key}={repo_id}: neither a local path nor a valid Hub id ({e})") from None
    except Exception as e:  # the Hub answered: no such repository, gated, revoked token ...
        reason = " ".join(str(e).split())[:300] or type(e).__name__
        raise MissingFileError(f"{key}={repo_id}: neither a local path nor a Hub model that can be fetched "
                               f"({type(e).__name__}: {reason})") from None


def resolve_source(source: str | Path, key: str = "policy") -> str:
    """A Hub id → its snapshot directory; anything else unchanged."""
    name = str(source)
    return str(resolve_hub_id(name, key)) if looks_like_hub_id(name) else name
