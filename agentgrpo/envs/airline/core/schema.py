"""Tool schemas generated from typed methods, and argument validation against them.

A tool is a method with type hints and a Google-style docstring (summary, then an
``Args:`` section). :func:`function_schema` turns it into an OpenAI function-calling
schema: ``str`` → string, ``int`` → integer, ``float`` → number (accepts ints, as
JSON Schema does), ``bool`` → boolean, ``Literal[...]`` → string enum, ``list[X]`` →
array, a ``TypedDict`` → object (field descriptions from its ``Attributes:``
section). Every parameter is required (τ-bench's tools have no optional ones).

:func:`validate_arguments` checks a call's arguments against that generated schema
before the tool runs and returns a fresh, normalised copy, so a tool never aliases
caller data and never sees a wrong type. Unknown top-level arguments are always
rejected (τ-bench's ``invoke(**kwargs)`` raises on them too). Nested objects (a flight,
a passenger, a payment) are closed by default (``extra_fields="reject"``: unknown fields
are errors, objects are rebuilt in schema field order); ``extra_fields="keep"`` opens
them as τ-bench does, which stores the caller's dicts: unknown fields are kept (any
JSON value) in the caller's key order. Numbers must be finite and within ±2**53
(larger values could not be serialised or hashed reliably).
"""
from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable
from typing import Any, Literal, TypedDict, TypeVar, get_args, get_origin, get_type_hints

MAX_ABS_NUMBER = 2**53
"""Largest magnitude accepted for integer and number arguments."""

_SECTION = re.compile(r"^\s*(Args|Arguments|Attributes|Returns|Raises|Yields|Examples?|Notes?):\s*$")
_ITEM = re.compile(r"^\s*(\w+)\s*(?:\([^)]*\))?:\s*(.*)$")


ToolKind = Literal["read", "write", "generic", "terminal"]
CabinClass = Literal["basic_economy", "economy", "business"]
FlightType = Literal["one_way", "round_trip"]
Insurance = Literal["yes", "no"]


class FlightRef(TypedDict):
    """One flight of an itinerary.

    Attributes:
        flight_number: The flight number, for example 'HAT001'.
        date: The departure date as YYYY-MM-DD, for example '2024-05-01'.
    """

    flight_number: str
    date: str


class PassengerInfo(TypedDict):
    """One traveller.

    Attributes:
        first_name: Given name, for example 'Noah'.
        last_name: Family name, for example 'Brown'.
        dob: Date of birth as YYYY-MM-DD, for example '1990-01-01'.
    """

    first_name: str
    last_name: str
    dob: str


class PaymentSplit(TypedDict):
    """One payment method and the amount charged to it.

    Attributes:
        payment_id: A payment method id from the user's profile, for example
            'credit_card_7815826', 'gift_card_7815826' or 'certificate_7815826'.
        amount: Dollars charged to this method.
    """

    payment_id: str
    amount: float


F = TypeVar("F", bound=Callable[..., Any])


def tool(kind: ToolKind) -> Callable[[F], F]:
    """Mark a method as a tool of the given kind (read, write, generic, terminal)."""

    def mark(func: F) -> F:
        func.tool_kind = kind  # type: ignore[attr-defined]
        return func

    return mark


def tool_kinds(toolkit: type) -> dict[str, ToolKind]:
    """Tool name → kind for the methods of ``toolkit`` marked with :func:`tool`, in order."""
    return {
        name: member.tool_kind
        for name, member in vars(toolkit).items()
        if callable(member) and hasattr(member, "tool_kind")
    }


class ArgumentError(ValueError):
    """A tool call's arguments do not match the tool's schema."""


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {name: text}).

    The description is everything before the first section header; item texts come
    from the ``Args:`` or ``Attributes:`` section, continuation lines joined.
    """
    lines = inspect.cleandoc(doc or "").splitlines()
    description: list[str] = []
    items: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in lines:
        header = _SECTION.match(line)
        if header:
            section, current = header.group(1), None
            continue
        if section is None:
            description.append(line.strip())
        elif section in ("Args", "Arguments", "Attributes"):
            item = _ITEM.match(line)
            indent = len(line) - len(line.lstrip())
            if item and indent <= 4:
                current = item.group(1)
                items[current] = item.group(2).strip()
            elif current and line.strip():
                items[current] = f"{items[current]} {line.strip()}"
    text = " ".join(part for part in description if part)
    return text, items


def _is_typed_dict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


def type_schema(tp: Any, description: str = "") -> dict[str, Any]:
    """JSON schema of one annotation (see the module docstring for the mapping)."""
    schema: dict[str, Any]
    origin = get_origin(tp)
    if origin is Literal:
        values = list(get_args(tp))
        schema = {"type": "string", "enum": values}
    elif origin is list:
        (item_tp,) = get_args(tp) or (Any,)
        schema = {"type": "array", "items": type_schema(item_tp)}
    elif _is_typed_dict(tp):
        _, field_docs = parse_docstring(tp.__doc__)
        hints = get_type_hints(tp)
        schema = {
            "type": "object",
            "properties": {k: type_schema(v, field_docs.get(k, "")) for k, v in hints.items()},
            "required": [k for k in hints if k in tp.__required_keys__],
        }
    elif tp is str:
        schema = {"type": "string"}
    elif tp is bool:
        schema = {"type": "boolean"}
    elif tp is int:
        schema = {"type": "integer"}
    elif tp is float:
        schema = {"type": "number"}
    else:
        raise TypeError(f"no JSON schema mapping for annotation {tp!r}")
    if description:
        # Put the description right after "type", the order people read schemas in.
        schema = {"type": schema.pop("type"), "description": description, **schema}
    return schema


def function_schema(func: Callable[..., Any]) -> dict[str, Any]:
    """OpenAI function-calling schema of a (bound or unbound) tool method."""
    description, arg_docs = parse_docstring(func.__doc__)
    hints = get_type_hints(func)
    params = [p for p in inspect.signature(func).parameters.values() if p.name != "self"]
    undocumented = [p.name for p in params if p.name not in arg_docs]
    if undocumented:
        raise TypeError(f"{func.__name__}: arguments without a docstring entry: {undocumented}")
    properties = {p.name: type_schema(hints[p.name], arg_docs[p.name]) for p in params}
    return {
        "type": "function",
        "function": {
            "name": func.__name__,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": [p.name for p in params],
            },
        },
    }


def _describe(value: Any) -> str:
    """Short description of a bad value for an error message (never a huge repr)."""
    kind = type(value).__name__
    if isinstance(value, (bool, int, float)) or value is None:
        text = repr(value)
        return f"{kind} {text[:40]}{'...' if len(text) > 40 else ''}"
    if isinstance(value, str):
        return f"string {value[:40]!r}{'...' if len(value) > 40 else ''}"
    return kind


def _check_number(value: Any, path: str, integer: bool) -> None:
    wanted = "an integer" if integer else "a number"
    ok_types = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, ok_types):
        raise ArgumentError(f"argument '{path}' must be {wanted}, got {_describe(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ArgumentError(f"argument '{path}' must be a finite number, got {value!r}")
    if abs(value) > MAX_ABS_NUMBER:
        raise ArgumentError(f"argument '{path}' is out of range (|value| must be <= 2**53)")


ExtraFields = Literal["reject", "keep"]
"""What unknown fields of a nested object do: fail validation, or stay (as τ-bench)."""


def _validate_object(
    schema: dict[str, Any], value: Any, path: str, extra_fields: ExtraFields = "reject"
) -> dict[str, Any]:
    where = f"argument '{path}'" if path else "arguments"
    if not isinstance(value, dict):
        raise ArgumentError(f"{where} must be a JSON object, got {_describe(value)}")
    properties = schema.get("properties", {})
    keep_extra = extra_fields == "keep" and bool(path)  # top-level arguments stay closed
    for key in value:
        if key not in properties:
            shown = key if isinstance(key, str) else _describe(key)
            if not path:
                raise ArgumentError(f"unexpected argument '{shown}'")
            if not keep_extra:
                raise ArgumentError(f"argument '{path}' has an unexpected field '{shown}'")
            if not isinstance(key, str):
                raise ArgumentError(f"argument '{path}' has a field name that is not a string: {shown}")
    for key in schema.get("required", ()):
        if key not in value:
            if path:
                raise ArgumentError(f"argument '{path}' is missing the field '{key}'")
            raise ArgumentError(f"missing required argument '{key}'")

    def field(key: str) -> Any:
        sub_path = f"{path}.{key}" if path else key
        if key in properties:
            return validate_value(properties[key], value[key], sub_path, extra_fields)
        return _json_value(value[key], sub_path)

    keys = value if keep_extra else [key for key in properties if key in value]
    return {key: field(key) for key in keys}


def _json_value(value: Any, path: str) -> Any:
    """A fresh copy of an unchecked JSON value (an extra field), with the number limits."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, (int, float)):
        _check_number(value, path, integer=False)
        return value
    if isinstance(value, list):
        return [_json_value(item, f"{path}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise ArgumentError(f"argument '{path}' has a field name that is not a string: {_describe(key)}")
        return {key: _json_value(item, f"{path}.{key}") for key, item in value.items()}
    raise ArgumentError(f"argument '{path}' must be a JSON value, got {_describe(value)}")


def validate_value(
    schema: dict[str, Any], value: Any, path: str, extra_fields: ExtraFields = "reject"
) -> Any:
    """Check ``value`` against ``schema``; return a fresh normalised copy."""
    kind = schema.get("type")
    if kind == "object":
        return _validate_object(schema, value, path, extra_fields)
    if kind == "array":
        if not isinstance(value, list):
            raise ArgumentError(f"argument '{path}' must be an array, got {_describe(value)}")
        items = schema.get("items", {})
        return [validate_value(items, item, f"{path}[{i}]", extra_fields) for i, item in enumerate(value)]
    if kind == "string":
        if not isinstance(value, str):
            raise ArgumentError(f"argument '{path}' must be a string, got {_describe(value)}")
        enum = schema.get("enum")
        if enum is not None and value not in enum:
            choices = ", ".join(repr(e) for e in enum)
            raise ArgumentError(f"argument '{path}' must be one of {choices}; got {_describe(value)}")
        return value
    if kind in ("integer", "number"):
        _check_number(value, path, integer=kind == "integer")
        return value
    if kind == "boolean":
        if not isinstance(value, bool):
            raise ArgumentError(f"argument '{path}' must be a boolean, got {_describe(value)}")
        return value
    raise TypeError(f"unsupported schema type {kind!r} at '{path}'")


def validate_arguments(
    parameters: dict[str, Any], kwargs: Any, extra_fields: ExtraFields = "reject"
) -> dict[str, Any]:
    """Validate a call's keyword arguments against a tool's ``parameters`` schema.

    ``extra_fields``: ``"reject"`` (closed nested objects) or ``"keep"`` (τ-bench: unknown
    fields of nested objects are kept; unknown top-level arguments are still errors).
    """
    return _validate_object(parameters, kwargs, "", extra_fields)


__all__ = [
    "ArgumentError",
    "CabinClass",
    "ExtraFields",
    "FlightRef",
    "FlightType",
    "Insurance",
    "PassengerInfo",
    "PaymentSplit",
    "ToolKind",
    "tool",
    "tool_kinds",
    "MAX_ABS_NUMBER",
    "function_schema",
    "parse_docstring",
    "type_schema",
    "validate_arguments",
    "validate_value",
]
