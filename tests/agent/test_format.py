"""Hermes tool-call rendering and parsing: well-formed turns, every malformed case, fuzzing."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgrpo.agent.format import (
    ParsedAction,
    openai_assistant_message,
    openai_assistant_text,
    parse_assistant,
    parse_openai_message,
    render_assistant,
)
from agentgrpo.envs.types import Action

TOOLS = frozenset({"get_user_details", "cancel_reservation", "list_all_airports", "think"})


def block(payload: str) -> str:
    return f"<tool_call>\n{payload}\n</tool_call>"


# -- well-formed turns -------------------------------------------------------------------


def test_tool_call_with_reasoning_renders_and_parses():
    text = render_assistant("I need the profile first.", "get_user_details", {"user_id": "mia_li_3668"})
    assert text == ('I need the profile first.\n<tool_call>\n'
                    '{"name": "get_user_details", "arguments": {"user_id": "mia_li_3668"}}\n</tool_call>')
    parsed = parse_assistant(text, TOOLS)
    assert parsed == ParsedAction("tool", "get_user_details", {"user_id": "mia_li_3668"},
                                  text="I need the profile first.")
    assert parsed.error is None and parsed.observation == ""
    assert parsed.to_action() == Action("get_user_details", {"user_id": "mia_li_3668"})


def test_tool_call_without_reasoning_and_without_arguments():
    text = render_assistant("", "list_all_airports", {})
    assert text == block('{"name": "list_all_airports", "arguments": {}}')
    assert parse_assistant(text, TOOLS) == ParsedAction("tool", "list_all_airports", {}, text="")
    # a missing "arguments" key means no arguments
    assert parse_assistant(block('{"name": "list_all_airports"}'), TOOLS).arguments == {}


def test_message_to_user():
    parsed = parse_assistant("  Could you give me your user id?\n", TOOLS)
    assert parsed == ParsedAction("respond", "respond", {"content": "Could you give me your user id?"},
                                  text="Could you give me your user id?")
    assert parsed.to_action() == Action.respond("Could you give me your user id?")
    assert render_assistant("Could you give me your user id?") == "Could you give me your user id?"


@pytest.mark.parametrize("tail", ["<|im_end|>", "<|im_end|>\n", "  \n", "<|endoftext|>", " <|im_end|> \n<|endoftext|>"])
def test_end_of_turn_token_and_trailing_whitespace_are_ignored(tail):
    call = render_assistant("Checking.", "cancel_reservation", {"reservation_id": "ZFA04Y"})
    assert parse_assistant(call + tail, TOOLS).kind == "tool"
    assert parse_assistant("Hello!" + tail, TOOLS).text == "Hello!"


def test_string_encoded_arguments_are_accepted():
    payload = json.dumps({"name": "cancel_reservation", "arguments": json.dumps({"reservation_id": "ZFA04Y"})})
    parsed = parse_assistant(block(payload), TOOLS)
    assert parsed.kind == "tool" and parsed.arguments == {"reservation_id": "ZFA04Y"}


def test_unicode_arguments_round_trip():
    text = render_assistant("Ok.", "think", {"thought": "Zoë → São Paulo ✈"})
    assert "Zoë → São Paulo ✈" in text  # kept as UTF-8, not \u escapes
    assert parse_assistant(text, TOOLS).arguments == {"thought": "Zoë → São Paulo ✈"}


# -- malformed turns: each is invalid with a message, never an exception ------------------

MALFORMED = {
    "empty": ("", "empty output"),
    "only end token": ("  <|im_end|>\n", "empty output"),
    "bad json": (block('{"name": "think", "arguments": {"thought": }'), "not valid JSON"),
    "not an object": (block('["think", {}]'), "got a JSON array"),
    "missing name": (block('{"arguments": {}}'), '"name"'),
    "non-string name": (block('{"name": 7, "arguments": {}}'), '"name"'),
    "empty name": (block('{"name": "", "arguments": {}}'), '"name"'),
    "arguments array": (block('{"name": "think", "arguments": ["x"]}'), "must be a JSON object, got a JSON array"),
    "arguments null": (block('{"name": "think", "arguments": null}'), "got a JSON null"),
    "arguments bad string": (block('{"name": "think", "arguments": "thought=x"}'), "string that is not a JSON object"),
    "arguments string of array": (block('{"name": "think", "arguments": "[1]"}'), "got a JSON array"),
    "unknown tool": (block('{"name": "book_flight", "arguments": {}}'), "unknown tool 'book_flight'"),
    "extra key": (block('{"name": "think", "arguments": {}, "id": "c1"}'), "unexpected key(s) 'id'"),
    "two blocks": (block('{"name": "think", "arguments": {}}') + "\n" + block('{"name": "think", "arguments": {}}'),
                   "found 2 <tool_call> blocks"),
    "two opens": ("<tool_call>\n<tool_call>\n{}\n</tool_call>", "found 2"),
    "call then message": (
        block('{"name": "think", "arguments": {}}') + "\nDone, anything else?", "text after </tool_call>"
    ),
    "unclosed": ('Let me look.\n<tool_call>\n{"name": "think", "arguments": {}}', "unclosed <tool_call>"),
    "stray close": ('{"name": "think", "arguments": {}}\n</tool_call>', "stray </tool_call> without"),
    "close before open": ("</tool_call> hmm <tool_call>", "stray </tool_call> before"),
    "empty block": ("<tool_call>\n\n</tool_call>", "empty <tool_call> block"),
    "deep nesting": (block("[" * 100_000 + "]" * 100_000), "not valid JSON"),
    "huge integer": (block('{"name": "think", "arguments": {"n": ' + "9" * 5000 + "}}"), "not valid JSON"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_turn_is_invalid_with_a_clear_message(case):
    text, expected = MALFORMED[case]
    parsed = parse_assistant(text, TOOLS)
    assert parsed.kind == "invalid" and parsed.name == "invalid" and parsed.arguments == {}
    assert expected in parsed.error
    assert parsed.observation == f"Error: {parsed.error}"
    assert parsed.to_action() is None


def test_unknown_tool_message_lists_the_tools_and_how_to_reply():
    error = parse_assistant(block('{"name": "respond", "arguments": {"content": "hi"}}'), TOOLS).error
    assert "cancel_reservation, get_user_details, list_all_airports, think" in error
    assert "reply without a <tool_call> block" in error


def test_invalid_turn_keeps_its_text():
    parsed = parse_assistant("Sure.\n<tool_call>\n{oops}\n</tool_call><|im_end|>", TOOLS)
    assert parsed.text == "Sure.\n<tool_call>\n{oops}\n</tool_call>"


# -- properties ------------------------------------------------------------------------

_plain_text = st.text(st.characters(blacklist_characters="<>", blacklist_categories=("Cs",)), max_size=60)
_json_scalars = st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.text(max_size=20) | st.floats(
    allow_nan=False, allow_infinity=False)
_json_values = st.recursive(_json_scalars, lambda children: st.lists(children, max_size=3)
                            | st.dictionaries(st.text(max_size=8), children, max_size=3), max_leaves=10)
_arguments = st.dictionaries(st.text(max_size=10), _json_values, max_size=4)


@settings(max_examples=300, deadline=None)
@given(text=_plain_text, name=st.sampled_from(sorted(TOOLS)), arguments=_arguments)
def test_tool_call_round_trip(text, name, arguments):
    parsed = parse_assistant(render_assistant(text, name, arguments), TOOLS)
    assert (parsed.kind, parsed.name, parsed.text) == ("tool", name, text.strip())
    assert parsed.arguments == arguments


@settings(max_examples=200, deadline=None)
@given(text=_plain_text.filter(lambda t: t.strip()))
def test_message_round_trip(text):
    parsed = parse_assistant(render_assistant(text), TOOLS)
    assert (parsed.kind, parsed.text, parsed.arguments) == ("respond", text.strip(), {"content": text.strip()})


_fragments = st.sampled_from([
    "<tool_call>", "</tool_call>", "\n", " ", '{"name": "think"', ', "arguments": {}', "}", "{", "[", "]",
    '"', "think", "hello", "<|im_end|>", ":", ",", '"arguments"', '"x"', "null", "1e999", "\\",
])


@settings(max_examples=500, deadline=None)
@given(text=st.text(max_size=200) | st.lists(_fragments, max_size=30).map("".join))
def test_parse_never_raises(text):
    parsed = parse_assistant(text, TOOLS)
    assert parsed.kind in ("tool", "respond", "invalid")
    if parsed.kind == "invalid":
        assert isinstance(parsed.error, str) and parsed.error
    else:
        assert parsed.error is None
    if parsed.kind == "tool":
        assert parsed.name in TOOLS and isinstance(parsed.arguments, dict)
    assert not (isinstance(parsed.arguments.get("content"), float) and math.isnan(parsed.arguments["content"]))


# -- OpenAI chat-completions messages ---------------------------------------------------------


def _api_call(name, arguments, call_id="call_a"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_openai_message_with_a_call():
    message = {"role": "assistant", "content": "Looking it up.",
               "tool_calls": [_api_call("get_user_details", '{"user_id": "mia_li_3668"}')]}
    parsed = parse_openai_message(message, TOOLS)
    assert parsed == ParsedAction("tool", "get_user_details", {"user_id": "mia_li_3668"}, text="Looking it up.")
    assert openai_assistant_text(message) == render_assistant("Looking it up.", "get_user_details",
                                                              {"user_id": "mia_li_3668"})


def test_openai_message_keeps_only_the_first_of_parallel_calls():
    message = {"role": "assistant", "content": None, "tool_calls": [
        _api_call("think", '{"thought": "a"}', "c1"), _api_call("list_all_airports", "{}", "c2")]}
    parsed = parse_openai_message(message, TOOLS)
    assert (parsed.kind, parsed.name, parsed.arguments) == ("tool", "think", {"thought": "a"})
    stored = openai_assistant_message(parsed, call_id="c1")
    expected_call = _api_call("think", '{"thought": "a"}', "c1")
    assert stored == {"role": "assistant", "content": None, "tool_calls": [expected_call]}
    # rendered for our template, both calls show, which our one-call format calls invalid
    assert parse_assistant(openai_assistant_text(message), TOOLS).kind == "invalid"


@pytest.mark.parametrize("message, expected", [
    ({"role": "assistant", "content": "Hi there"}, ("respond", None)),
    ({"role": "assistant", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
     ("respond", None)),
    ({"role": "assistant", "content": None}, ("invalid", "empty output")),
    ({"role": "assistant", "tool_calls": [_api_call("think", "{bad")]}, ("invalid", "not a JSON object")),
    ({"role": "assistant", "tool_calls": [_api_call("fly", "{}")]}, ("invalid", "unknown tool 'fly'")),
    ({"role": "assistant", "tool_calls": [{"id": "x"}]}, ("invalid", '"name"')),
    ({"role": "assistant", "tool_calls": "garbage"}, ("invalid", '"name"')),
    ({"role": "assistant", "tool_calls": [None]}, ("invalid", '"name"')),
    ("not a dict", ("invalid", "could not read")),
])
def test_openai_message_cases(message, expected):
    kind, error = expected
    parsed = parse_openai_message(message, TOOLS)
    assert parsed.kind == kind
    if error:
        assert error in parsed.error
    else:
        assert parsed.text == "Hi there"


@settings(max_examples=100, deadline=None)
@given(text=_plain_text, name=st.sampled_from(sorted(TOOLS)), arguments=_arguments)
def test_openai_message_round_trip(text, name, arguments):
    parsed = ParsedAction("tool", name, arguments, text=text.strip())
    assert parse_openai_message(openai_assistant_message(parsed), TOOLS) == parsed
