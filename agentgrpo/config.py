"""Layered YAML configuration over typed dataclasses.

A job's settings are a dataclass tree (the schema: defaults, types, ``Literal``
choices, one docstring per field, cross-field checks in ``__post_init__``). On top of
the defaults we merge, in order: the job's packaged YAML (``configs/grpo.yaml``), an
experiment file (``experiment=joint`` → ``configs/experiment/joint.yaml``), a user YAML
file (``--config path``), and ``key=value`` overrides from the command line
(Hydra/OmegaConf syntax). OmegaConf parses and merges the layers; the conversion to
the dataclasses is ours, so unknown keys, wrong types and bad choices fail at start
with a message naming the key, on every OmegaConf version (veRL's Hydra pins 2.3,
which has no ``Literal`` support).

Expected failures are :class:`AgentGRPOError`s: a bad config (:class:`ConfigError`), a
missing or broken file (:class:`DataError`, :class:`MissingFileError`) or a server that
cannot be reached (:class:`EndpointError`). Each is raised where the problem is found,
with a one-line message naming the key or file and how to fix it; the ``agentgrpo``
command prints that line and exits with code 2 (``--debug`` shows the traceback).
"""
from __future__ import annotations

import dataclasses
import fnmatch
import re
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
T = TypeVar("T")


class AgentGRPOError(Exception):
    """An expected failure: the message says what went wrong, where (key or file) and how to fix it."""


class ConfigError(AgentGRPOError, ValueError):
    """A bad configuration: the message names the offending key and what to do."""


class DataError(AgentGRPOError, OSError):
    """A file or directory a job reads is incomplete or unreadable: the message names it."""


class MissingFileError(DataError, FileNotFoundError):
    """A file or directory a job needs does not exist: the message names it and how to get it."""


class EndpointError(AgentGRPOError, ConnectionError):
    """A server the job talks to (an OpenAI-compatible endpoint) cannot be reached."""


def require(ok: bool, key: str, value: Any, allowed: str) -> None:
    """The range check of ``__post_init__``: unless ``ok``, a ConfigError naming ``key`` and ``allowed``."""
    if not ok:
        raise ConfigError(f"{key}={value!r} is invalid: {allowed}")


def available_experiments(config_dir: Path = CONFIG_DIR) -> list[str]:
    return sorted(p.stem for p in (config_dir / "experiment").glob("*.yaml"))


def load_config(
    schema: type[T],
    overrides: list[str] | None = None,
    *,
    defaults: str | Path | list[str | Path] | None = None,
    config_file: str | Path | None = None,
    config_dir: Path = CONFIG_DIR,
) -> T:
    """Build a validated ``schema`` instance from YAML layers and ``key=value`` overrides.

    ``experiment=NAME`` in ``overrides`` selects ``config_dir/experiment/NAME.yaml``
    (applied after ``defaults``, before the file and the other overrides). ``defaults``
    may be a list of files, applied in order. A section whose dataclass names a
    ``SHORTHAND`` key accepts a plain value for it: ``policy=DIR`` is ``policy.init=DIR``.
    """
    shorthands = _shorthands(schema)
    experiment, rest = None, []
    for item in overrides or []:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form key=value")
        key, value = item.split("=", 1)
        key = key.strip().lstrip("+")
        if key == "experiment":
            experiment = value.strip()
        else:
            rest.append(f"{key}.{shorthands[key]}={value}" if key in shorthands else f"{key}={value}")
    layers: list[DictConfig] = []
    for default in [] if defaults is None else defaults if isinstance(defaults, (list, tuple)) else [defaults]:
        path = Path(default)
        layers.append(_load_yaml(path if path.is_absolute() else config_dir / path))
    if experiment:
        path = config_dir / "experiment" / f"{experiment}.yaml"
        if not path.is_file():
            choices = available_experiments(config_dir)
            raise ConfigError(f"experiment={experiment!r} is unknown; choose one of {choices}")
        layers.append(_load_yaml(path))
        layers.append(OmegaConf.create({"experiment": experiment}))
    if config_file is not None:
        layers.append(_load_yaml(Path(config_file)))
    layers = [_expand_shorthands(layer, shorthands) for layer in layers]
    try:
        layers.append(OmegaConf.from_dotlist(rest))
    except Exception as e:  # unparsable override value
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"cannot parse overrides {rest}: {reason}") from None
    return from_dict(schema, _resolve(layers, _defaults(schema)))


def _shorthands(schema: Any, prefix: str = "") -> dict[str, str]:
    """Dotted keys of sections whose dataclass has a ``SHORTHAND`` key, mapped to that key."""
    found: dict[str, str] = {}
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        hint = hints.get(f.name)
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            key = prefix + f.name
            if getattr(hint, "SHORTHAND", None):
                found[key] = hint.SHORTHAND
            found.update(_shorthands(hint, key + "."))
    return found


def _expand_shorthands(layer: DictConfig, shorthands: dict[str, str]) -> DictConfig:
    """A YAML layer with ``section: value`` written as ``section: {SHORTHAND: value}``."""
    data = OmegaConf.to_container(layer, resolve=False)
    changed = False
    for dotted, short in shorthands.items():
        *parents, last = dotted.split(".")
        node = data
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and last in node and not isinstance(node[last], (dict, type(None))):
            node[last] = {short: node[last]}
            changed = True
    return OmegaConf.create(data) if changed else layer


def _defaults(schema: type) -> dict[str, Any]:
    """The schema's defaults as plain data (empty when it has none to build from)."""
    try:
        return to_dict(schema())
    except (TypeError, ValueError):
        return {}


def _resolve(layers: list[DictConfig], defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """Merge the layers and resolve ``${...}`` interpolations; a failure names its key.

    An interpolation may name any key of the schema (``${seed}``), whether a layer sets it
    or only the dataclass defaults do, since the YAMLs state only what differs from those.
    The result holds only the keys the layers set: the defaults resolve, never fill in.
    """
    if not layers:
        return {}
    try:
        merged = OmegaConf.merge(*layers)
        given = OmegaConf.to_container(merged, resolve=False)
        resolved = OmegaConf.to_container(OmegaConf.merge(OmegaConf.create(defaults or {}), merged), resolve=True)
        return _restrict(resolved, given)  # type: ignore[return-value]
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "config"
        reason = str(getattr(e, "msg", None) or e).splitlines()[0]
        raise ConfigError(f"{key}: cannot resolve its value ({reason}); fix or remove the ${{...}} "
                          "interpolation") from None


def _restrict(resolved: Any, given: Any) -> Any:
    """``resolved`` with only the mapping keys ``given`` has, level by level."""
    if isinstance(given, dict) and isinstance(resolved, dict):
        return {key: _restrict(resolved[key], value) for key, value in given.items()}
    return resolved


def split_overrides(overrides: list[str], stages: tuple[str, ...]) -> dict[str, list[str]]:
    """Overrides of a multi-stage job, per stage: ``sft.x=1`` goes to the ``sft`` stage
    only (prefix removed); an override without a stage prefix goes to every stage."""
    per_stage: dict[str, list[str]] = {stage: [] for stage in stages}
    for item in overrides:
        head, _, rest = item.partition(".")
        if head in per_stage and "=" in rest:
            per_stage[head].append(rest)
        else:
            for stage in stages:
                per_stage[stage].append(item)
    return per_stage


def from_dict(schema: type[T], data: dict[str, Any], prefix: str = "") -> T:
    """Instantiate dataclass ``schema`` from plain data, checking keys and types."""
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix or 'config'} must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(schema)
    known = {f.name: f for f in dataclasses.fields(schema) if f.init}
    for key in data:
        if key not in known:
            raise ConfigError(f"unknown config key {prefix + str(key)!r}; valid keys here: {sorted(known)}")
    kwargs = {key: _convert(hints[key], value, prefix + key) for key, value in data.items()}
    try:
        return schema(**kwargs)
    except (ConfigError, TypeError, ValueError) as e:  # __post_init__ checks name their keys
        raise ConfigError(_placed(str(e), schema, prefix)) from None


def _placed(message: str, schema: type, prefix: str) -> str:
    """A section's check names its keys under the section's usual place (``SECTION``: ``rollout.``);
    where it sits elsewhere (``data.rft_rollout.``) the message names the keys there."""
    section = getattr(schema, "SECTION", None)
    if section is None or not prefix or prefix == f"{section}.":
        return message
    return re.sub(rf"(?<![\w.]){re.escape(section)}\.", prefix, message)


_YAML_BOOL_WORDS = {False: ("off", "no", "false", "n"), True: ("on", "yes", "true", "y")}
"""The words YAML 1.1 (OmegaConf's and Hydra's reading of ``key=value``) turns into each bool."""


def _convert(hint: Any, value: Any, key: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for option in (a for a in args if a is not type(None)):
            try:
                return _convert(option, value, key)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if len(errors) == 1 else
                          f"{key}: invalid value {value!r}, expected {' or '.join(map(_describe_type, args))}")
    if origin is Literal:
        if isinstance(value, bool) and value not in args:  # YAML 1.1 reads a bare off/on/no/yes as a bool
            words = [a for a in args if isinstance(a, str) and a.lower() in _YAML_BOOL_WORDS[value]]
            if len(words) == 1:
                return words[0]
        if value not in args:
            raise ConfigError(f"{key}: invalid value {value!r}, expected one of {list(args)}")
        return value
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict) and getattr(hint, "SHORTHAND", None):
            value = {hint.SHORTHAND: value}
        return from_dict(hint, value, key + ".")
    if origin in (list, tuple) or hint in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise ConfigError(f"{key}: expected {len(args)} values, got {len(value)}")
            return tuple(_convert(a, v, f"{key}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
        item = args[0] if args else Any
        items = [_convert(item, v, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    return _convert_scalar(hint, value, key)


def _describe_type(hint: Any) -> str:
    """A schema type as an error message names it: ``a bool``, ``one of ['auto']``."""
    if typing.get_origin(hint) is Literal:
        return f"one of {list(typing.get_args(hint))}"
    return "null" if hint is type(None) else f"a {getattr(hint, '__name__', hint)}"


def _convert_scalar(hint: Any, value: Any, key: str) -> Any:
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    else:
        raise ConfigError(f"{key}: unsupported type {hint!r} in the config schema")
    raise ConfigError(f"{key}: expected {hint.__name__}, got {value!r} ({type(value).__name__})")


def _load_yaml(path: Path) -> DictConfig:
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        loaded = OmegaConf.load(path)
    except Exception as e:  # YAML syntax errors
        reason = " ".join(str(e).split())
        raise ConfigError(f"cannot parse {path}: {reason}") from None
    if not isinstance(loaded, DictConfig):
        raise ConfigError(f"{path} must hold a mapping at the top level")
    return loaded


def to_dict(config: Any) -> dict[str, Any]:
    """The resolved config as plain data (written at start and stored in checkpoints)."""
    return _plain(dataclasses.asdict(config)) if dataclasses.is_dataclass(config) else dict(config)


def to_yaml(config: Any) -> str:
    return OmegaConf.to_yaml(OmegaConf.create(to_dict(config)))


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


ABSENT = _Absent()
"""The value of a key that one of two compared configs does not have."""


def flatten_keys(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as ``{"dotted.key": value}`` (an empty section stays a value: ``{}``)."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            flat.update(flatten_keys(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def differing_keys(saved: dict[str, Any], new: dict[str, Any], *, may_change: Sequence[str] = (),
                   defaults: dict[str, Any] | None = None,
                   assumed: dict[str, Any] | None = None) -> dict[str, tuple[Any, Any]]:
    """The dotted keys whose values differ between the resolved config a run was saved with and
    a new one, as ``{key: (old, new)}`` (``ABSENT`` where a side lacks the key): what a resume
    of that run would compute differently.

    ``may_change``: ``fnmatch`` patterns of keys a resume may change (ignored). ``defaults``: the
    schema's defaults; a key the saved config lacks is no difference when the new value is its
    default (a setting added after the run was saved defaults to what the code did before).
    ``assumed``: values a saved config that lacks the key is compared as (a default that has
    changed since: the run had the old one).
    """
    old_flat, new_flat = flatten_keys(saved), flatten_keys(new)
    for key, previous in (assumed or {}).items():
        if key in new_flat:
            old_flat.setdefault(key, previous)
    default_flat = flatten_keys(defaults or {})
    differences = {}
    for key in sorted(old_flat.keys() | new_flat.keys()):
        old, value = old_flat.get(key, ABSENT), new_flat.get(key, ABSENT)
        if old is ABSENT and key in default_flat and value == default_flat[key]:
            continue
        if old != value and not any(fnmatch.fnmatchcase(key, pattern) for pattern in may_change):
            differences[key] = (old, value)
    return differences


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
