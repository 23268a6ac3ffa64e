"""LoRA adapters through ``peft`` (``policy.lora.*``): attach, load, merge.

A LoRA checkpoint is a standard PEFT adapter directory — ``adapter_config.json`` and
``adapter_model.safetensors`` — with the tokenizer and ``agentgrpo.json`` beside them.
``adapter_config.json`` names the base model (``base_model_name_or_path``): a Hub id
as given, or the absolute path of a local checkpoint (a preset or ``.gguf`` base is
recorded as given, which only our loader reads). So all of these load it::

    agentgrpo eval --policy runs/sft/final          # or agentgrpo serve runs/sft/final
    base = AutoModelForCausalLM.from_pretrained(BASE)
    model = PeftModel.from_pretrained(base, "runs/sft/final")
    model = AutoModelForCausalLM.from_pretrained("runs/sft/final")   # transformers + peft

``peft`` is the ``lora`` extra: ``pip install 'agentgrpo[lora]'``.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from agentgrpo.config import ConfigError, DataError
from agentgrpo.policy.settings import LoraConfig

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
LORA_INSTALL = "pip install 'agentgrpo[lora]'  (peft)"


def require_peft(what: str = "policy.lora") -> Any:
    """The ``peft`` module, or a one-line ConfigError with the install command."""
    if importlib.util.find_spec("peft") is None:
        raise ConfigError(f"{what} needs the peft package: {LORA_INSTALL}")
    import peft

    return peft


def is_adapter_dir(path: str | Path) -> bool:
    return (Path(path) / ADAPTER_CONFIG).is_file()


def is_peft_model(model: Any) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def adapter_base(path: str | Path) -> str:
    """The base model an adapter directory was trained on (``base_model_name_or_path``)."""
    config_path = Path(path) / ADAPTER_CONFIG
    try:
        base = json.loads(config_path.read_text()).get("base_model_name_or_path")
    except (OSError, ValueError) as e:
        raise DataError(f"{config_path} is not a readable PEFT adapter config ({e}); re-save the checkpoint") from None
    if not base:
        raise DataError(f"{config_path} names no base model (base_model_name_or_path); set it to the base "
                        "checkpoint directory or Hub id the adapter was trained on")
    return str(base)


def portable_base(source: str | Path) -> str:
    """How an adapter records its base: a Hub id or preset as given, a local path made absolute."""
    name = str(source)
    return str(Path(name).resolve()) if Path(name).exists() else name


def attach_lora(model: Any, config: LoraConfig, base: str | Path) -> Any:
    """Wrap ``model`` in fresh trainable adapters on ``config.target_modules`` (base weights frozen).

    ``base``: where the base weights come from, written into the adapter config.
    """
    peft = require_peft()
    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    targets = [name for name in config.target_modules if name in present]
    if not targets:
        raise ConfigError(f"policy.lora.target_modules={config.target_modules}: none of these modules is in the "
                          f"model; its linear layers include {sorted(n for n in present if n.endswith('proj'))[:12]}")
    model.name_or_path = portable_base(base)  # what peft writes as base_model_name_or_path
    settings = peft.LoraConfig(r=config.rank, lora_alpha=config.alpha, lora_dropout=config.dropout,
                               target_modules=targets, task_type="CAUSAL_LM")
    return peft.get_peft_model(model, settings)


def load_adapter(base_model: Any, path: str | Path, trainable: bool) -> Any:
    """The adapter at ``path`` on ``base_model``: trainable (to continue training) or merged into it."""
    peft = require_peft(f"the LoRA checkpoint {path}")
    model = peft.PeftModel.from_pretrained(base_model, str(path), is_trainable=trainable)
    return model if trainable else model.merge_and_unload()


def adapts_embeddings(model: Any) -> bool:
    """Whether a PEFT model's adapters sit on the embedding or output layer (then they are saved with it)."""
    targets = [t for config in model.peft_config.values() for t in (config.target_modules or [])]
    return any("embed" in t or "lm_head" in t for t in targets)


def trainable_share(model: Any) -> tuple[int, int]:
    """(trainable parameters, all parameters)."""
    total = sum(p.numel() for p in model.parameters())
    return sum(p.numel() for p in model.parameters() if p.requires_grad), total
