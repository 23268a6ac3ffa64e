"""Checks against the machine that every job shares: files, checkpoints, servers, packages.

A config's values are checked when it is built (``__post_init__``). What only the machine
can tell is checked first thing in each job, so a missing file is one line naming the key
and the fix instead of a traceback minutes into a run. The checks live with what they
guard: this module holds the generic ones (a file, a checkpoint's files, a server that
accepts connections and serves a model, a tracker's package); ``agentgrpo.policy.preflight``
a policy's source and device, ``agentgrpo.envs.preflight`` an environment's data and LLM
user, ``agentgrpo.train.preflight`` and ``agentgrpo.eval.preflight`` each job's whole list.
No torch here.
"""
from __future__ import annotations

import importlib.util
import json
import socket
import urllib.parse
import urllib.request
from pathlib import Path

from agentgrpo.config import ConfigError, DataError, EndpointError, MissingFileError
from agentgrpo.openai_client import OpenAIChatPolicy, OpenAIClientError

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
CONNECT_TIMEOUT_S = 2.0
"""A server that does not accept a TCP connection within this time counts as unreachable."""
TRACKER_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "swanlab": "swanlab"}


def check_checkpoint(path: str | Path, key: str, hint: str) -> Path:
    """A HF checkpoint directory (or a PEFT adapter directory) with its config, weights and
    tokenizer; safetensors files intact."""
    directory = Path(path)
    if not directory.is_dir():
        raise MissingFileError(f"{key}: no checkpoint directory {directory}; {hint}")
    adapter = (directory / "adapter_config.json").is_file()
    wanted = (("adapter_config.json",), ("adapter_model.safetensors",)) if adapter else (("config.json",),
                                                                                        WEIGHT_FILES, TOKENIZER_FILES)
    for names in wanted:
        if not any((directory / name).is_file() for name in names):
            raise MissingFileError(f"{key}: {directory} is not a complete checkpoint, it has no "
                                   f"{' or '.join(names)}; {hint}")
    for weights in sorted(directory.glob("*.safetensors")):
        check_safetensors(weights, key)
    return directory


def check_safetensors(path: Path, key: str) -> None:
    """The file's header parses and every tensor it lists lies inside the file (a cut copy fails)."""
    size = path.stat().st_size
    try:
        with path.open("rb") as f:
            head = f.read(8)
            length = int.from_bytes(head, "little") if len(head) == 8 else -1
            if length < 0 or 8 + length > size:
                raise ValueError("its header is cut off")
            header = json.loads(f.read(length))
        end = max((t["data_offsets"][1] for name, t in header.items() if name != "__metadata__"), default=0)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
        raise DataError(f"{key}: {path} is not a readable safetensors file ({e}); re-save the checkpoint "
                        "or point to another one") from None
    if 8 + length + end > size:
        raise DataError(f"{key}: {path} is truncated ({size} bytes, its header describes {8 + length + end}); "
                        "re-save or re-copy the checkpoint")


def check_file(path: str | Path, key: str, hint: str) -> Path:
    if not Path(path).is_file():
        raise MissingFileError(f"{key}: no file {path}; {hint}")
    return Path(path)


def check_writable_dir(path: str | Path, key: str) -> Path:
    """The directory exists or can be made (a run writes there from its first step)."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{key}: cannot create directory {path} ({e.strerror}); "
                          "point it at a writable path") from None
    return Path(path)


def check_served_model(base_url: str, model: str, key: str) -> None:
    """``model`` is among the ids ``GET <base_url>/models`` lists (skipped if the server lists none)."""
    client = OpenAIChatPolicy(base_url, model, max_retries=0, timeout=10.0)
    try:
        served = client.list_models()
    except OpenAIClientError:  # no /models route (some servers), or not OpenAI-shaped: the run will tell
        return
    finally:
        client.close()
    if served and model not in served:
        raise ConfigError(f"{key}={model!r} is not served at {base_url}; it serves {served[:8]}: set {key} to one "
                          "of those")


def check_endpoint(base_url: str, key: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """The server at ``base_url`` accepts a TCP connection within ``timeout`` seconds.

    Bounded on purpose: the HTTP client retries a refused connection with backoff for
    half a minute, which is right mid-run but not for a server that was never started.
    Skipped when a proxy would carry the requests (the proxy decides reachability).
    """
    parts = urllib.parse.urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{key}={base_url!r} is not an http(s) URL (e.g. http://127.0.0.1:8000/v1)")
    proxies = urllib.request.getproxies()
    if proxies.get(parts.scheme) and not urllib.request.proxy_bypass(parts.hostname):
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        with socket.create_connection((parts.hostname, port), timeout=timeout):
            pass
    except (OSError, ValueError) as e:
        reason = getattr(e, "strerror", None) or str(e) or type(e).__name__
        raise EndpointError(f"{key}: cannot connect to {base_url} ({reason}); start the server there "
                            f"or set {key}=URL") from None


def check_trackers_installed(trackers: list[str], key: str) -> None:
    for name in trackers:
        package = TRACKER_PACKAGES.get(name)
        if package and importlib.util.find_spec(package) is None:
            raise ConfigError(f"{key}: tracker {name} needs the {package} package: pip install {package} "
                              f"(or remove it from {key})")
