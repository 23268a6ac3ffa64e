"""The text of a chat message's ``content`` field, read one way by every part of the package.

OpenAI-style messages carry ``content`` as a string, ``None`` or a list of content parts;
the LLM user, the chat format, the transcript reader, the server and the chat-completions
client all need it as one string, and must agree on what counts as text.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def content_text(content: Any) -> str:
    """The text of a chat message's ``content``, by the one rule every reader of messages uses.

    A string is itself and ``None`` is empty. A list of content parts is the text of its
    text parts joined: a part that is a string, or an object whose ``type`` is ``"text"`` (or
    absent) with a string ``text``; image, audio and refusal parts carry no text. Anything
    else (an object that a transcript from another program stored as content) is its JSON text.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part if isinstance(part, str) else part["text"] for part in content if _is_text_part(part))
    return json.dumps(content, ensure_ascii=False, default=str)


def _is_text_part(part: Any) -> bool:
    return isinstance(part, str) or (isinstance(part, Mapping) and part.get("type", "text") == "text"
                                     and isinstance(part.get("text"), str))
