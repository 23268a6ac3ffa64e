"""Checks against the machine, run by each job before any model is built.

A config's values are checked when it is built (``__post_init__``). What only the
machine can tell — a checkpoint directory and its files, a PRM-Lite weights file, a
τ-bench data directory, a tracker package, a server — is checked here, first thing in
each job (``preflight_sft``, ``preflight_grpo``, ``preflight_eval``, ``preflight_env``),
so a missing file is one line naming the key and the fix instead of a traceback minutes
into a run. No torch at import time: the ``agentgrpo`` command imports this early.
"""
from __future__ import annotations

import importlib.util
import json
import socket
import urllib.parse
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from agentgrpo.config import ConfigError, DataError, EndpointError, MissingFileError

if TYPE_CHECKING:
    from agentgrpo.envs.config import EnvConfig
    from agentgrpo.eval.evaluator import EvalConfig
    from agentgrpo.policy.settings import PolicyConfig
    from agentgrpo.train.grpo_config import GRPOConfig
    from agentgrpo.train.sft import SFTConfig

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
CONNECT_TIMEOUT_S = 2.0
"""A server that does not accept a TCP connection within this time counts as unreachable."""
TRACKER_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "swanlab": "swanlab"}
SFT_HINT = "run `agentgrpo sft` first (it writes runs/sft/final) or set policy.init=DIR"


# ---- single checks ----------------------------------------------------------------------
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


def check_policy_source(source: str | Path, key: str, hint: str, *, allow_built: bool = False) -> None:
    """A checkpoint directory, a ``.gguf`` file, or a preset name (``allow_built``: built presets too)."""
    from agentgrpo.policy.presets import PRESETS

    name = str(source)
    if name in PRESETS:
        kind = PRESETS[name].kind
        if kind == "gguf":
            from agentgrpo.policy.gguf import find_smollm2_gguf

            try:
                find_smollm2_gguf()
            except FileNotFoundError as e:
                raise MissingFileError(f"{key}={name}: {e}") from None
        elif not allow_built:
            raise ConfigError(f"{key}={name} is a preset built from scratch, not a checkpoint; {hint}")
        return
    if name.endswith(".gguf"):
        if not Path(name).is_file():
            raise MissingFileError(f"{key}: no GGUF file {name}; {hint}")
        return
    from agentgrpo.policy.hub import looks_like_hub_id, resolve_hub_id

    if looks_like_hub_id(name):  # through the local HF cache (downloaded first only when online)
        name = str(resolve_hub_id(name, key))
    directory = check_checkpoint(name, key, f"{hint} (presets: {sorted(PRESETS)})" if allow_built else hint)
    if (directory / "adapter_config.json").is_file():
        from agentgrpo.policy.lora import adapter_base, require_peft

        require_peft(f"{key}={source} (a LoRA adapter)")
        check_policy_source(adapter_base(directory), f"{key} (the base model of the adapter {source})",
                            "restore it, or edit base_model_name_or_path in the adapter's adapter_config.json")


def check_device(name: str, key: str = "policy.device") -> None:
    """The device exists on this machine (imports torch)."""
    from agentgrpo.policy.device import resolve_device

    resolve_device(name, key)


def check_training_policy(policy: PolicyConfig) -> None:
    """Device present; peft installed when LoRA is asked for."""
    check_device(policy.device)
    if policy.lora.enabled:
        from agentgrpo.policy.lora import require_peft

        require_peft("policy.lora.rank > 0")


def check_file(path: str | Path, key: str, hint: str) -> Path:
    if not Path(path).is_file():
        raise MissingFileError(f"{key}: no file {path}; {hint}")
    return Path(path)


def check_served_model(base_url: str, model: str, key: str) -> None:
    """``model`` is among the ids ``GET <base_url>/models`` lists (skipped if the server lists none)."""
    from agentgrpo.policy.openai_client import OpenAIChatPolicy, OpenAIClientError

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


def check_prm_weights(path: str, key: str = "reward.prm_weights") -> None:
    """The file exists and parses as a PRM-Lite config (its own checks name the rule)."""
    from agentgrpo.rewards.config import PRMLiteConfig

    check_file(path, key, "point it at a PRM-Lite YAML (see agentgrpo/rewards/prm_lite.yaml) or remove it")
    try:
        PRMLiteConfig.from_yaml(path)
    except Exception as e:  # a YAML syntax error or a bad rule weight: the message says which
        raise ConfigError(f"{key}: {path} is not a valid PRM-Lite config ({' '.join(str(e).split())})") from None


# ---- per job ----------------------------------------------------------------------------
def preflight_env(config: EnvConfig, prefix: str = "env.") -> None:
    """The domain's data complete (e.g. a τ-bench data directory); the LLM user's server reachable."""
    from agentgrpo.envs.registry import check_data

    check_data(config, prefix)
    if config.user.kind == "llm":
        check_endpoint(config.user.base_url, f"{prefix}user.base_url")
        check_served_model(config.user.base_url, config.user.model, f"{prefix}user.model")


def preflight_sft(config: SFTConfig) -> None:
    preflight_env(config.env)
    check_policy_source(config.policy.init, "policy.init", "set policy to a preset, a checkpoint directory or a "
                        "Hub id", allow_built=True)
    check_training_policy(config.policy)
    check_trackers_installed(config.logging.trackers, "logging.trackers")


def preflight_grpo(config: GRPOConfig, *, check_init: bool = True) -> None:
    """``check_init=False`` when the starting checkpoint is made earlier in the same job (quickstart)."""
    preflight_env(config.env)
    check_training_policy(config.policy)
    if check_init:
        check_policy_source(config.policy.init, "policy.init", SFT_HINT)
    if config.reward.prm_weights:
        check_prm_weights(config.reward.prm_weights)
    check_trackers_installed(config.logging.trackers, "logging.trackers")


def preflight_eval(config: EvalConfig, *, check_policy: bool = True) -> None:
    """Data and servers first (an unreachable one fails here, before any episode), then the model."""
    preflight_env(config.env)
    if config.policy_kind == "openai":
        check_endpoint(config.endpoint.base_url, "endpoint.base_url")
        check_served_model(config.endpoint.base_url, config.endpoint.model, "endpoint.model")
    elif config.policy_kind == "checkpoint":
        check_device(config.policy.device)
        if check_policy:
            check_policy_source(config.policy.init, "policy", "pass a checkpoint directory (e.g. runs/sft/final), "
                                "a Hub id, oracle or openai")
