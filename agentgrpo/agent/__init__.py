"""Conversation format (chat rendering, tool-call parsing) and trajectory types.

``format``: Hermes tool-call rendering/parsing (``parse_assistant`` never raises).
``chat``: ``ChatFormat`` — system prompt, template rendering, delta encoding, OpenAI
message conversion. ``masking``: Render-Twice-Diff SFT labels. ``types``: Step, Turn,
Trajectory. Importing this package does not import torch or transformers.
"""
from agentgrpo.agent.chat import ChatFormat, build_system_prompt
from agentgrpo.agent.format import (
    ParsedAction,
    openai_assistant_message,
    parse_assistant,
    parse_openai_message,
    render_assistant,
)
from agentgrpo.agent.masking import IGNORE_INDEX, SFTExample, build_sft_example, build_sft_examples
from agentgrpo.agent.types import Step, Trajectory, Turn

__all__ = [
    "IGNORE_INDEX",
    "ChatFormat",
    "ParsedAction",
    "SFTExample",
    "Step",
    "Trajectory",
    "Turn",
    "build_sft_example",
    "build_sft_examples",
    "build_system_prompt",
    "openai_assistant_message",
    "parse_assistant",
    "parse_openai_message",
    "render_assistant",
]
