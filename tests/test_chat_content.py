"""``content_text``: the one rule by which every reader of chat messages gets their text."""
from __future__ import annotations

import pytest

from agentgrpo.chat_content import content_text


@pytest.mark.parametrize("content, text", [
    ("I want to cancel.", "I want to cancel."),
    (None, ""),
    ([], ""),
    ([{"type": "text", "text": "I want "}, {"type": "text", "text": "to cancel."}], "I want to cancel."),
    ([{"text": "untyped "}, "a bare string"], "untyped a bare string"),  # parts another program wrote
    ([{"type": "image_url", "image_url": {"url": "x"}}, {"type": "text", "text": "ok"}], "ok"),
    ([{"type": "refusal", "refusal": "no"}, {"type": "input_audio", "text": "heard"}], ""),
    ([{"type": "text", "text": 7}, {"type": "text"}, None, 3], ""),  # no string text: nothing
    ({"reservation_id": "ZFA04Y", "status": "é"}, '{"reservation_id": "ZFA04Y", "status": "é"}'),
    (5, "5"),
])
def test_content_text(content, text):
    assert content_text(content) == text
