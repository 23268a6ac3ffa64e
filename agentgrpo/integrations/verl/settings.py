"""Where the veRL plugins read their settings: the objective whole, and the rest by name.

**The objective** (``agentgrpo.algos.ObjectiveSettings``: estimator knobs, clip,
aggregation, KL, LLDS, entropy) travels as one value, the JSON of its fields in
``AGENTGRPO_OBJECTIVE`` (:func:`objective_json`, :func:`read_objective`). ``agentgrpo hosts
verl`` writes it from the native config, the launch scripts export it and forward it to
every Ray worker, and the estimators, the ``agentgrpo_llds`` loss and the launch check all
read it with :func:`read_objective`; unset, the objective is ``ObjectiveSettings()``'s
defaults. veRL's own copies of some of its values (the estimator's name, the actor's KL
and entropy coefficients) are Hydra overrides from the same command, and the launch check
refuses a config where they disagree with it.

**Everything else** (the PRM-Lite weight, the user simulator, the estimators' mini-batch
layout) is looked up by name (:func:`setting`): in the config veRL hands the plugin, else
in an environment variable ``AGENTGRPO_<NAME>``.

No veRL import here, so it can be tested anywhere.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, fields
from typing import Any, TypeVar

from agentgrpo.algos import ObjectiveSettings

T = TypeVar("T")

ENV_PREFIX = "AGENTGRPO_"
OBJECTIVE_ENV = "AGENTGRPO_OBJECTIVE"


def objective_json(objective: ObjectiveSettings) -> str:
    """``objective`` as the one value ``AGENTGRPO_OBJECTIVE`` holds (JSON of every field)."""
    return json.dumps(asdict(objective), sort_keys=True)


def read_objective() -> ObjectiveSettings:
    """The objective exported in ``AGENTGRPO_OBJECTIVE``; its defaults when unset."""
    return parse_objective(os.environ.get(OBJECTIVE_ENV, ""))


def parse_objective(text: str) -> ObjectiveSettings:
    """The objective of an ``AGENTGRPO_OBJECTIVE`` value (:func:`objective_json`); empty: the defaults.

    Raises:
        ValueError: text that is not a JSON object of ``ObjectiveSettings`` fields, naming the variable.
    """
    text = text.strip()
    if not text:
        return ObjectiveSettings()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{OBJECTIVE_ENV} is not JSON ({exc}): write it with `agentgrpo hosts verl`") from None
    known = {f.name for f in fields(ObjectiveSettings)}
    if not isinstance(data, dict) or set(data) - known:
        unknown = sorted(set(data) - known) if isinstance(data, dict) else data
        raise ValueError(f"{OBJECTIVE_ENV} must be a JSON object of {sorted(known)}; got {unknown!r}")
    return ObjectiveSettings(**data)


def env_name(key: str) -> str:
    """``prm_coef`` -> ``AGENTGRPO_PRM_COEF``."""
    return ENV_PREFIX + key.upper()


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
