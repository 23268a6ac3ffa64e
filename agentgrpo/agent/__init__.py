"""Conversation format (chat rendering, tool-call parsing) and trajectory types.

``format``: Hermes tool-call rendering/parsing (``parse_assistant`` never raises).
``turn``: ``play_turn`` — one generated turn parsed and played on an environment.
``chat``: ``ChatFormat`` — system prompt, template rendering, delta encoding, OpenAI
message conversion. ``masking``: Render-Twice-Diff SFT labels. ``types``: Turn,
Trajectory (``Step`` is an environment type: ``agentgrpo.envs.types``). Importing this
package does not import torch or transformers.
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
from agentgrpo.agent.turn import play_turn
from agentgrpo.agent.types import Trajectory, Turn

__all__ = [
    "IGNORE_INDEX",
    "ChatFormat",
    "ParsedAction",
    "SFTExample",
    "Trajectory",
    "Turn",
    "build_sft_example",
    "build_sft_examples",
    "build_system_prompt",
    "openai_assistant_message",
    "parse_assistant",
    "parse_openai_message",
    "play_turn",
    "render_assistant",
]
