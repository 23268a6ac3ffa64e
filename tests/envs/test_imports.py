"""The environment layer stands alone: importing any of it loads no torch, agent or policy code."""
from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import agentgrpo.envs

FORBIDDEN = ("torch", "agentgrpo.agent", "agentgrpo.policy", "agentgrpo.rollout", "agentgrpo.train")


def envs_modules() -> list[str]:
    """Every module under ``agentgrpo/envs`` (found on disk, so a new one is covered too)."""
    found = pkgutil.walk_packages(agentgrpo.envs.__path__, prefix="agentgrpo.envs.")
    return ["agentgrpo.envs", *sorted(info.name for info in found)]


def test_every_envs_module_is_found():
    modules = envs_modules()
    for name in ("agentgrpo.envs.airline", "agentgrpo.envs.airline.factory", "agentgrpo.envs.turn",
                 "agentgrpo.envs.types", "agentgrpo.envs.user_sim"):
        assert name in modules


def test_importing_envs_loads_no_torch_agent_or_policy():
    modules = envs_modules()
    code = (
        f"import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        f"    importlib.import_module(name)\n"
        f"print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(modules) <= set(loaded)
    leaked = [m for m in loaded if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]
    assert leaked == []
