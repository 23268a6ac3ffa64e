"""``agentgrpo env ...``: the environment commands (list, show, play, solve tasks).

They are the airline domain's (``agentgrpo.envs.airline.cli``, which takes its own
``--source``/``--seed`` flags); this module is the one name ``agentgrpo.cli`` knows, so
the command table never names a domain package. Imported only for ``agentgrpo env``.
"""
from __future__ import annotations

import importlib
from typing import Any

DOMAIN_COMMANDS = "agentgrpo.envs.airline.cli"
"""The module whose ``register(subparsers)`` adds ``env`` and its actions."""


def register(subparsers: Any) -> None:
    importlib.import_module(DOMAIN_COMMANDS).register(subparsers)
