"""Tool calls out of generated text as vLLM's hermes parser returns them, and the stream-safe prefix."""
from __future__ import annotations

import json

from agentgrpo.serve.hermes import ToolCall, extract_tool_calls, streamable_prefix


def block(payload: dict) -> str:
    return f"<tool_call>\n{json.dumps(payload)}\n</tool_call>"


def test_every_well_formed_call_is_returned_whatever_its_tool_or_arguments():
    text = ("Let me check.\n" + block({"name": "no_such_tool", "arguments": {"x": 1}}) + "\n"
            + block({"name": "get_user_details", "arguments": {}}) + "\ntrailing words")
    content, calls = extract_tool_calls(text)
    assert content == "Let me check."
    assert calls == [ToolCall("no_such_tool", '{"x": 1}'), ToolCall("get_user_details", "{}")]


def test_arguments_forms():
    assert extract_tool_calls(block({"name": "f"}))[1] == [ToolCall("f", "{}")]  # absent: no arguments
    double = block({"name": "f", "arguments": json.dumps({"a": "é"})})
    assert extract_tool_calls(double) == (None, [ToolCall("f", '{"a": "é"}')])  # double-encoded: the object
    assert extract_tool_calls(block({"name": "f", "arguments": [1]}))[1] == [ToolCall("f", "[1]")]


def test_an_unclosed_last_block_counts_when_its_json_is_whole():
    assert extract_tool_calls('<tool_call>{"name": "f", "arguments": {}}') == (None, [ToolCall("f", "{}")])


def test_one_malformed_block_makes_the_whole_text_content():
    for text in ["Hi <tool_call>{not json}</tool_call>", block({"name": "f"}) + block({"arguments": {}}),
                 '<tool_call>["f"]</tool_call>', '<tool_call>{"name": ""}</tool_call>', "<tool_call>{\"name\": \"f\""]:
        assert extract_tool_calls(text) == (text, [])
    assert extract_tool_calls("plain reply") == ("plain reply", [])


def test_streamable_prefix_never_sends_what_may_become_a_call_a_stop_or_trailing_space():
    held = ["STOP", "<|im_end|>"]
    assert streamable_prefix("Hello there ", held, True) == "Hello there"
    assert streamable_prefix("Hello <tool", held, True) == "Hello"
    assert streamable_prefix("Hello <tool", held, False) == "Hello <tool"  # without tools a tag is text
    assert streamable_prefix('Hi\n<tool_call>{"name"', held, True) == "Hi"
    assert streamable_prefix("Hi ST", held, True) == "Hi" and streamable_prefix("Hi STOP more", held, True) == "Hi"
    assert streamable_prefix("Hi <|im_e", held, True) == "Hi"
    assert streamable_prefix("caf\ufffd", held, True) == "caf"
