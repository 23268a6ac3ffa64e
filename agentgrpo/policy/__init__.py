"""Policy backends: HF transformers (tiny built presets, checkpoints, GGUF, Hub ids, LoRA).

Exports resolve lazily, so ``from agentgrpo.policy import PolicyConfig`` does not import
torch or transformers. A model behind an OpenAI-compatible server is reached through
``agentgrpo.openai_client`` (below the environment, which uses it for LLM users).
"""
from __future__ import annotations

import importlib
from typing import Any

from agentgrpo.policy.presets import PRESETS, ModelPreset, get_preset

_LAZY = {
    "HFPolicy": "agentgrpo.policy.hf",
    "build_policy": "agentgrpo.policy.hf",
    "load_policy": "agentgrpo.policy.hf",
    "save_policy": "agentgrpo.policy.hf",
    "load_for_training": "agentgrpo.policy.hf",
    "load_tokenizer": "agentgrpo.policy.hf",
    "resolve_device": "agentgrpo.policy.device",
    "resolve_source": "agentgrpo.policy.hub",
    "PolicyConfig": "agentgrpo.policy.settings",
    "LoraConfig": "agentgrpo.policy.settings",
    "find_smollm2_gguf": "agentgrpo.policy.source",
    "resolve_policy_source": "agentgrpo.policy.source",
    "load_gguf": "agentgrpo.policy.gguf",
    "train_tokenizer": "agentgrpo.policy.tokenizer",
    "domain_corpus": "agentgrpo.policy.tokenizer",
}

__all__ = ["PRESETS", "ModelPreset", "get_preset", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'agentgrpo.policy' has no attribute {name!r}")
