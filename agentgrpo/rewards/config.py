"""PRM-Lite configuration: rule weights, limits, tool classes and entity schemas.

``PRMLiteConfig`` is the typed schema of ``prm_lite.yaml`` (packaged next to this
file). Every field's default is read from that YAML, so the YAML is the single
source of the shipped numbers; ``PRMLiteConfig()`` equals the packaged file.
A custom YAML (``PRMLiteConfig.from_yaml``) may set any subset of the fields; a key
it sets replaces the default, except ``weights``, where unnamed rules keep their
packaged weight. Unknown keys, wrong types, bad regexes and wrong-signed weights
fail at construction with a message that says what to fix.
"""
from __future__ import annotations

import copy
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import yaml

PACKAGED_YAML = Path(__file__).with_name("prm_lite.yaml")

STEP_RULES = ("P1", "P2", "P3", "P4", "P5", "P7", "P9", "B1", "B2", "B3", "B4", "B5", "B7")
TRAJECTORY_RULES = ("P6", "P8", "B6")
RULE_IDS = ("P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8", "P9",
            "B1", "B2", "B3", "B4", "B5", "B6", "B7")
TOOL_CLASSES = ("write", "read", "terminal", "think", "generic")
"""``generic``: tools that neither read nor change the world (``calculate``)."""


@functools.lru_cache(maxsize=1)
def _packaged_raw() -> dict[str, Any]:
    with open(PACKAGED_YAML, encoding="utf-8") as f:
        return yaml.safe_load(f)


def _packaged(key: str, help_text: str) -> Any:
    """A dataclass field whose default is the packaged YAML's value for ``key``."""
    return field(default_factory=lambda: copy.deepcopy(_packaged_raw()[key]),
                 metadata={"help": help_text})


@dataclass(frozen=True)
class EntitySchema:
    """One entity type: its shape and the argument names it governs."""

    pattern: str
    arguments: tuple[str, ...]
    calendar: bool = False

    @classmethod
    def coerce(cls, name: str, value: Any) -> EntitySchema:
        if isinstance(value, EntitySchema):
            return value
        if not isinstance(value, Mapping) or "pattern" not in value:
            raise ValueError(f"entity_schemas.{name}: expected a mapping with 'pattern', "
                             f"'arguments' and optional 'calendar', got {value!r}")
        unknown = set(value) - {"pattern", "arguments", "calendar"}
        if unknown:
            raise ValueError(f"entity_schemas.{name}: unknown keys {sorted(unknown)}")
        try:
            re.compile(value["pattern"])
        except re.error as e:
            raise ValueError(f"entity_schemas.{name}.pattern is not a valid regex: {e}") from e
        return cls(str(value["pattern"]), tuple(value.get("arguments", ())),
                   bool(value.get("calendar", False)))


@dataclass
class PRMLiteConfig:
    """Everything PRM-Lite reads; see ``prm_lite.yaml`` and docs/prm_lite.md."""

    weights: dict[str, float] = _packaged(
        "weights", "rule id -> weight; P* <= 0, B* >= 0; P8 is per extra tool step")
    process_clamp: tuple[float, float] = _packaged(
        "process_clamp", "[low, high] bounds of process_score")
    step_mean_over: Literal["productive", "steps", "actions"] = _packaged(
        "step_mean_over", "mean_step denominator: productive steps (default; padding-proof), "
        "all steps, or all but explicit think calls")
    think_text_chars: int = _packaged(
        "think_text_chars", "assistant text longer than this makes a step a think step")
    terse_text_chars: int = _packaged(
        "terse_text_chars", "P7: non-think assistant text shorter than this is terse")
    no_reasoning_min_steps: int = _packaged(
        "no_reasoning_min_steps", "P6: minimum trajectory length for the rule to apply")
    free_tool_steps: int = _packaged(
        "free_tool_steps", "P8: tool steps allowed before each further one is charged")
    overlong_counts_think: bool = _packaged(
        "overlong_counts_think", "P8: count explicit think calls as tool steps")
    exploration_min_read_tools: int = _packaged(
        "exploration_min_read_tools", "B6: distinct read tools needed")
    think_bonus_cap: float = _packaged(
        "think_bonus_cap", "B5: the most the think bonus may add in one trajectory")
    recovery_blocked_by: tuple[str, ...] = _packaged(
        "recovery_blocked_by", "B1 does not fire on a step that fired one of these rules")
    chain_blocked_by: tuple[str, ...] = _packaged(
        "chain_blocked_by", "B2/B3 do not fire on a step that fired one of these rules")
    tool_classes: dict[str, list[str]] = _packaged(
        "tool_classes", "class (write/read/terminal/think/generic) -> tool names")
    placeholder_keywords: tuple[str, ...] = _packaged(
        "placeholder_keywords", "whole-value placeholders, compared case-insensitively")
    placeholder_patterns: tuple[str, ...] = _packaged(
        "placeholder_patterns", "regexes that fully match a placeholder value (any case)")
    entity_schemas: dict[str, EntitySchema] = _packaged(
        "entity_schemas", "entity type -> {pattern, arguments, calendar}")
    confirm_phrases: tuple[str, ...] = _packaged(
        "confirm_phrases", "B7: affirmative words/phrases of an explicit confirmation")
    deny_words: tuple[str, ...] = _packaged(
        "deny_words", "B7: a reply with one of these before the affirmative is no yes")
    confirm_window_words: int = _packaged(
        "confirm_window_words", "B7: the affirmative must start within this many words")

    def __post_init__(self) -> None:
        self._check_types()
        self._normalise_weights()
        if self.step_mean_over not in ("productive", "steps", "actions"):
            raise ValueError(f"step_mean_over must be 'productive', 'steps' or 'actions', "
                             f"got {self.step_mean_over!r}")
        lo, hi = self.process_clamp
        if not lo <= 0.0 <= hi:
            raise ValueError(
                f"process_clamp must satisfy low <= 0 <= high, got {self.process_clamp}")
        for name in ("chain_blocked_by", "recovery_blocked_by"):
            unknown_rules = set(getattr(self, name)) - set(RULE_IDS)
            if unknown_rules:
                raise ValueError(f"{name} names unknown rules {sorted(unknown_rules)}")
        self._normalise_tool_classes()
        for pattern in self.placeholder_patterns:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"placeholder_patterns: {pattern!r} is not a regex: {e}") from e
        self.entity_schemas = {name: EntitySchema.coerce(name, spec)
                               for name, spec in dict(self.entity_schemas).items()}

    def _check_types(self) -> None:
        ints = ("think_text_chars", "terse_text_chars", "no_reasoning_min_steps",
                "free_tool_steps", "exploration_min_read_tools", "confirm_window_words")
        for name in ints:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise TypeError(f"{name} must be a non-negative int, got {value!r}")
        if not isinstance(self.overlong_counts_think, bool):
            raise TypeError(f"overlong_counts_think must be true or false, "
                            f"got {self.overlong_counts_think!r}")
        if not isinstance(self.think_bonus_cap, (int, float)) or self.think_bonus_cap < 0:
            raise TypeError(f"think_bonus_cap must be a number >= 0, got {self.think_bonus_cap!r}")
        if len(tuple(self.process_clamp)) != 2:
            raise TypeError(f"process_clamp must be [low, high], got {self.process_clamp!r}")
        self.process_clamp = (float(self.process_clamp[0]), float(self.process_clamp[1]))
        for name in ("chain_blocked_by", "recovery_blocked_by", "placeholder_keywords",
                     "placeholder_patterns", "confirm_phrases", "deny_words"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise TypeError(f"{name} must be a list of strings, got {value!r}")
            setattr(self, name, tuple(value))

    def _normalise_weights(self) -> None:
        unknown = set(self.weights) - set(RULE_IDS)
        if unknown:
            raise ValueError(f"weights: unknown rule ids {sorted(unknown)}; known: {RULE_IDS}")
        merged = dict(_packaged_raw()["weights"])
        merged.update(self.weights)
        for rule, weight in merged.items():
            if isinstance(weight, bool) or not isinstance(weight, (int, float)):
                raise TypeError(f"weights.{rule} must be a number, got {weight!r}")
            if rule.startswith("P") and weight > 0:
                raise ValueError(f"weights.{rule} is a penalty and must be <= 0, got {weight}")
            if rule.startswith("B") and weight < 0:
                raise ValueError(f"weights.{rule} is a bonus and must be >= 0, got {weight}")
        self.weights = {rule: float(merged[rule]) for rule in RULE_IDS}
        if self.weights["B1"] > -self.weights["P9"]:
            raise ValueError(f"weights.B1 (recovery, {self.weights['B1']}) must not exceed the "
                             f"cost of the error it follows (-weights.P9 = {-self.weights['P9']}): "
                             f"an error followed by a recovery would pay")

    def _normalise_tool_classes(self) -> None:
        unknown = set(self.tool_classes) - set(TOOL_CLASSES)
        if unknown:
            raise ValueError(f"tool_classes: unknown classes {sorted(unknown)}; "
                             f"use {TOOL_CLASSES}")
        owner: dict[str, str] = {}
        for cls, names in self.tool_classes.items():
            for name in names:
                if name in owner and owner[name] != cls:
                    raise ValueError(f"tool {name!r} is in both {owner[name]!r} and {cls!r}")
                owner[name] = cls
        self.tool_classes = {cls: list(self.tool_classes.get(cls, ())) for cls in TOOL_CLASSES}

    def class_of_tool(self) -> dict[str, str]:
        """Tool name -> class, the lookup the engine uses."""
        return {name: cls for cls, names in self.tool_classes.items() for name in names}

    @classmethod
    def from_dict(cls, overrides: Mapping[str, Any]) -> PRMLiteConfig:
        """Packaged defaults with ``overrides`` applied (see the module docstring)."""
        known = {f.name for f in fields(cls)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(f"unknown PRM-Lite config keys {sorted(unknown)}; "
                             f"known keys: {sorted(known)}")
        return cls(**dict(overrides))

    @classmethod
    def from_yaml(cls, path: str | Path) -> PRMLiteConfig:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
        if not isinstance(data, Mapping):
            raise ValueError(f"{path}: expected a mapping at the top level")
        return cls.from_dict(data)
