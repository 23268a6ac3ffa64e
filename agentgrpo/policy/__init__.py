"""Policy backends: HF transformers (tiny built presets, checkpoints, GGUF) and OpenAI-compatible clients."""
