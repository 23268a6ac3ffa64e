"""The airline domain: τ-bench-faithful database, tools, grading and loaders.

No torch here. See :class:`AirlineDomain` for the API and docs/environment.md for
the τ-bench quirks and their fixes.
"""
from __future__ import annotations

# ---- domain core: database state, tools, grading, τ-bench loader ----
from agentgrpo.envs.airline.db import (
    NOW,
    NOW_DATE,
    NOW_ISO,
    NOW_TIME,
    TABLES,
    TAU_BENCH_AIRPORTS,
    TIMEZONE,
    AirlineState,
    BaseDB,
    DictState,
    Store,
    copy_json,
)
from agentgrpo.envs.airline.domain import COMPAT_MODES, AirlineDomain
from agentgrpo.envs.airline.grader import GradeResult, canonical_json, multiset_hash, naive_hash
from agentgrpo.envs.airline.schema import CabinClass, FlightType, Insurance
from agentgrpo.envs.airline.tau_bench import load_tau_bench
from agentgrpo.envs.airline.tools import TOOL_KINDS, AirlineTools, Compat, ToolError
from agentgrpo.envs.types import ERROR_PREFIX

__all__ = [
    "AirlineDomain",
    "AirlineState",
    "AirlineTools",
    "BaseDB",
    "COMPAT_MODES",
    "CabinClass",
    "Compat",
    "DictState",
    "ERROR_PREFIX",
    "FlightType",
    "GradeResult",
    "Insurance",
    "NOW",
    "NOW_DATE",
    "NOW_ISO",
    "NOW_TIME",
    "Store",
    "TABLES",
    "TAU_BENCH_AIRPORTS",
    "TIMEZONE",
    "TOOL_KINDS",
    "ToolError",
    "canonical_json",
    "copy_json",
    "load_tau_bench",
    "multiset_hash",
    "naive_hash",
]

# ---- world and task generators (added by the generator module's author) ----
from agentgrpo.envs.airline.environment import AirlineEnv, EpisodeResult, run_episode
from agentgrpo.envs.airline.oracle import OracleAgent
from agentgrpo.envs.airline.policy import load_policy
from agentgrpo.envs.airline.scenario import Confirmation, Scenario
from agentgrpo.envs.airline.task_gen import FAMILY_NAMES, SPLITS, generate_domain, split_tasks
from agentgrpo.envs.airline.world import WorldSpec, generate_world

__all__ += [
    "AirlineEnv",
    "Confirmation",
    "EpisodeResult",
    "FAMILY_NAMES",
    "OracleAgent",
    "SPLITS",
    "Scenario",
    "WorldSpec",
    "generate_domain",
    "generate_world",
    "load_policy",
    "run_episode",
    "split_tasks",
]
