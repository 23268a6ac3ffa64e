"""Machine checks of a policy: its source (checkpoint, GGUF file, preset, Hub id, LoRA adapter) and device.

Called by every job that loads a model (``sft``, ``train``, ``eval``, ``serve``, ``ablate``)
before it builds one. torch is imported only by ``check_device``.
"""
from __future__ import annotations

from pathlib import Path

from agentgrpo.config import ConfigError, MissingFileError
from agentgrpo.policy.hub import looks_like_hub_id, resolve_hub_id
from agentgrpo.policy.lora import adapter_base, require_peft
from agentgrpo.policy.presets import PRESETS
from agentgrpo.policy.settings import PolicyConfig
from agentgrpo.policy.source import find_smollm2_gguf
from agentgrpo.preflight import check_checkpoint


def check_policy_source(source: str | Path, key: str, hint: str, *, allow_built: bool = False) -> None:
    """A checkpoint directory, a ``.gguf`` file, or a preset name (``allow_built``: built presets too)."""
    name = str(source)
    if name in PRESETS:
        kind = PRESETS[name].kind
        if kind == "gguf":
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
    if looks_like_hub_id(name):  # through the local HF cache (downloaded first only when online)
        name = str(resolve_hub_id(name, key))
    directory = check_checkpoint(name, key, f"{hint} (presets: {sorted(PRESETS)})" if allow_built else hint)
    if (directory / "adapter_config.json").is_file():
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
        require_peft("policy.lora.rank > 0")
