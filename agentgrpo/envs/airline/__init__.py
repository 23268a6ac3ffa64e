"""The airline domain: τ-bench-faithful database, tools, grading, task generation and simulation.

Three sub-packages: ``core`` (database, tools, policy text, grader, episode API, τ-bench
loader), ``tasks`` (seeded worlds and task families) and ``simulation`` (scenarios,
the scripted user's script, the oracle agent); ``factory`` builds all of it from a
config and ``cli`` is ``agentgrpo env``. No torch here. See :class:`AirlineDomain` for
the API and docs/environment.md for the τ-bench quirks and their fixes.
"""
from __future__ import annotations

# ---- domain core: database state, tools, grading, τ-bench loader ----
from agentgrpo.envs.airline.core.db import (
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
from agentgrpo.envs.airline.core.domain import COMPAT_MODES, AirlineDomain

# ---- episodes, task generation, simulation ----
from agentgrpo.envs.airline.core.environment import AirlineEnv, EpisodeResult, run_episode
from agentgrpo.envs.airline.core.grader import GradeResult, canonical_json, multiset_hash, naive_hash
from agentgrpo.envs.airline.core.policy import load_policy
from agentgrpo.envs.airline.core.schema import CabinClass, FlightType, Insurance
from agentgrpo.envs.airline.core.tau_bench import load_tau_bench
from agentgrpo.envs.airline.core.tool_base import Compat, ToolError
from agentgrpo.envs.airline.core.tools import TOOL_KINDS, AirlineTools
from agentgrpo.envs.airline.simulation.oracle import OracleAgent
from agentgrpo.envs.airline.simulation.plans import oracle_agent
from agentgrpo.envs.airline.simulation.scenario import Confirmation, Scenario
from agentgrpo.envs.airline.tasks.generate import FAMILY_NAMES, SPLITS, generate_domain, split_tasks
from agentgrpo.envs.airline.tasks.world import WorldSpec, generate_world
from agentgrpo.envs.types import ERROR_PREFIX

__all__ = [
    "AirlineDomain",
    "AirlineEnv",
    "AirlineState",
    "AirlineTools",
    "BaseDB",
    "COMPAT_MODES",
    "CabinClass",
    "Compat",
    "Confirmation",
    "DictState",
    "ERROR_PREFIX",
    "EpisodeResult",
    "FAMILY_NAMES",
    "FlightType",
    "GradeResult",
    "Insurance",
    "NOW",
    "NOW_DATE",
    "NOW_ISO",
    "NOW_TIME",
    "OracleAgent",
    "SPLITS",
    "Scenario",
    "Store",
    "TABLES",
    "TAU_BENCH_AIRPORTS",
    "TIMEZONE",
    "TOOL_KINDS",
    "ToolError",
    "WorldSpec",
    "canonical_json",
    "copy_json",
    "generate_domain",
    "generate_world",
    "load_policy",
    "load_tau_bench",
    "multiset_hash",
    "naive_hash",
    "oracle_agent",
    "run_episode",
    "split_tasks",
]
