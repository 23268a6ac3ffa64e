"""Fresh ids for every pass over a demonstration: SFT that cannot memorise its worlds' ids.

A demonstration copies ids (a user id, a reservation, a payment method) from what the user
and the tools said. Trained on a few worlds for several epochs, a small policy lowers its loss
on those tokens faster by remembering the ids than by reading them, and then writes ids of the
right shape but from its training worlds in a world it has never seen. Relabelling (the
delexicalise-and-refill trick of task-oriented dialogue systems) removes that shortcut: each
pass gives every copied id a new random value of the same shape, consistently in every
message, so the only way to predict it is to find it in context.

Which strings are ids is what the copy check says (``copied_values``: string arguments of the
assistant's calls that contain a digit and appear earlier in the context), kept to word-like
values that hold both a letter and a digit, so dates, times and amounts keep their meaning,
and every other word of a copied id's shape is refilled with it (the rest of a search result's
flights, say), so the copied one never stands out. A new value keeps the old one's shape:
digits become random digits, capitals random capitals; lower-case letters and punctuation stay
(``sara_lee_2916`` → ``sara_lee_7351``, ``U73KOY`` → ``QX4RBM``), so an id still agrees with the
name beside it. Pure Python; no torch.
"""
from __future__ import annotations

import random
import re
import string
from collections.abc import Sequence
from typing import Any

from agentgrpo.envs.delex import map_texts
from agentgrpo.train.copy_check import copied_values

_ID_LIKE = re.compile(r"[A-Za-z0-9_]*(?:[A-Za-z][A-Za-z0-9_]*\d|\d[A-Za-z0-9_]*[A-Za-z])[A-Za-z0-9_]*")
_WORD = re.compile(r"(?<![A-Za-z0-9_])[A-Za-z0-9_]+(?![A-Za-z0-9_])")


def relabel_ids(messages: Sequence[dict[str, Any]], rng: random.Random) -> list[dict[str, Any]]:
    """``messages`` with every id replaced by a fresh same-shape value, everywhere it occurs
    (user and tool text, the assistant's words and calls; the system prompt is the policy, not
    the world, and is left as it is); the input is not changed. The ids
    are the copied ones and every other word of the same shape (``HAT023`` with every ``HAT0..``
    flight in a search result), so the refilled id is never the odd one out in a list.
    A transcript that copies no id comes back equal to the input."""
    shapes = {_shape(v) for v in copied_values(messages) if _ID_LIKE.fullmatch(v)}
    if not shapes:
        return [dict(m) for m in messages]
    words: set[str] = set()

    def collect(text: str) -> str:
        words.update(w for w in _WORD.findall(text) if _shape(w) in shapes and _ID_LIKE.fullmatch(w))
        return text

    world = [m for m in messages if m.get("role") != "system"]
    map_texts(world, collect)
    originals = sorted(words, key=len, reverse=True)
    taken = set(originals)
    mapping = {}
    for value in originals:
        new = _same_shape(value, rng)
        while new in taken:
            new = _same_shape(value, rng)
        taken.add(new)
        mapping[value] = new
    # whole words only: U73KOY inside a longer token (or a longer id holding a shorter one) is left alone
    pattern = re.compile(r"(?<![A-Za-z0-9_])(?:" + "|".join(map(re.escape, originals)) + r")(?![A-Za-z0-9_])")

    def refill(text: str) -> str:
        return pattern.sub(lambda m: mapping[m.group(0)], text)

    return [dict(m) if m.get("role") == "system" else map_texts(m, refill) for m in messages]


def _shape(value: str) -> str:
    """Digits as 9, capitals as A, the rest kept: what a refilled value shares with the original."""
    return "".join("9" if c.isdigit() else "A" if c.isascii() and c.isupper() else c for c in value)


def _same_shape(value: str, rng: random.Random) -> str:
    return "".join(rng.choice(string.digits) if c.isdigit()
                   else rng.choice(string.ascii_uppercase) if c.isascii() and c.isupper()
                   else c for c in value)
