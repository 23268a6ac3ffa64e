"""Where the veRL plugins read their hyper-parameters: veRL config first, then ``AGENTGRPO_*``.

veRL hands an advantage estimator the ``algorithm`` config (a Hydra ``DictConfig`` in
0.6–0.9, which accepts our own keys added with ``+algorithm.turn_discount_alpha=1.05``)
and a policy loss the *actor* config (a strict dataclass that rejects unknown keys, and
never sees ``algorithm``). So every setting is looked up by name in the config it gets,
and when absent there, in an environment variable ``AGENTGRPO_<NAME>``; the launch
scripts export those and forward them to every Ray worker (``examples/verl/common.sh``).

No veRL import here: this module is pure Python so it can be tested anywhere.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")

ENV_PREFIX = "AGENTGRPO_"
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def env_name(key: str) -> str:
    """``turn_discount_alpha`` -> ``AGENTGRPO_TURN_DISCOUNT_ALPHA``."""
    return ENV_PREFIX + key.upper()


def as_bool(value: Any) -> bool:
    """A boolean from a config value or an environment string (``1/0``, ``true/false``...)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"expected a boolean (true/false/1/0), got {value!r}")


def choice(choices: tuple[str, ...]) -> Callable[[Any], str]:
    """A cast accepting only one of ``choices`` (for ``setting``)."""

    def cast(value: Any) -> str:
        text = str(value).strip()
        if text not in choices:
            raise ValueError(f"choose one of {list(choices)}")
        return text

    return cast


def optional_float(value: Any) -> float | None:
    """A float, or None for ``none``/``null``/empty (e.g. "no turn discount")."""
    if value is None or str(value).strip().lower() in ("", "none", "null"):
        return None
    return float(value)


def optional_int(value: Any) -> int | None:
    """A positive int, or None for ``none``/``null``/empty."""
    if value is None or str(value).strip().lower() in ("", "none", "null"):
        return None
    number = int(value)
    if number < 1:
        raise ValueError("must be >= 1")
    return number


def config_value(config: Any, key: str) -> Any:
    """``config[key]`` for a dict, DictConfig or veRL dataclass config; None when absent."""
    if config is None:
        return None
    if isinstance(config, Mapping) or hasattr(config, "get"):
        try:
            return config.get(key, None)
        except (AttributeError, KeyError, TypeError):
            return None
    return getattr(config, key, None)


def setting(config: Any, key: str, default: T, cast: Callable[[Any], T]) -> T:
    """The value of ``key``: from ``config``, else from ``AGENTGRPO_<KEY>``, else ``default``.

    ``cast`` converts the value found (config values may already have the right type;
    environment values are strings). A value that does not convert raises ValueError
    naming the key, so a typo in a launch script fails at the first step.
    """
    value = config_value(config, key)
    source = f"config key {key!r}"
    if value is None:
        value = os.environ.get(env_name(key))
        source = env_name(key)
    if value is None:
        return default
    try:
        return cast(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"bad value {value!r} for {source}: {exc}") from None
