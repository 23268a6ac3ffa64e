"""The 14 airline tools of τ-bench as one toolset, with their kinds and schemas.

``AirlineTools`` joins the tools that change nothing (:mod:`.read_tools`) and those that
write (:mod:`.write_tools`) over the state, mode and failure of :mod:`.tool_base`.
Names, arguments, JSON types, enums and required lists are τ-bench's; schemas are
generated from the methods' signatures and docstrings (:mod:`.schema`). Behaviour is
τ-bench's, quirks included, under ``compat="tau_bench"``; ``compat="fixed"`` applies
τ²-bench's fixes (table in ``docs/environment.md``). Tools raise ``ToolError`` (or any
exception) on failure; the domain turns that into an ``"Error: ..."`` observation and
discards the transaction, so a failing tool changes nothing. Tools return a JSON-able
value (serialised with ``json.dumps``) or a string.
"""
from __future__ import annotations

from typing import Any

from agentgrpo.envs.airline.core.read_tools import ReadTools
from agentgrpo.envs.airline.core.schema import ToolKind, function_schema, tool_kinds
from agentgrpo.envs.airline.core.write_tools import WriteTools


class AirlineTools(ReadTools, WriteTools):
    """The airline tools bound to one database state and compatibility mode."""


TOOL_KINDS: dict[str, ToolKind] = dict(sorted({**tool_kinds(ReadTools), **tool_kinds(WriteTools)}.items()))
"""Tool name → kind, in τ-bench's order (which is alphabetical)."""

TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    name: function_schema(getattr(AirlineTools, name)) for name in TOOL_KINDS
}
"""Tool name → OpenAI function-calling schema, generated once at import."""
