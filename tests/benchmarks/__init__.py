"""Tests of the scripts under ``benchmarks/``."""
from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_script(name: str) -> types.ModuleType:
    """``benchmarks/<name>.py`` as a module. Its ``benchmarks._common`` is the repository's, which
    this test package (also named ``benchmarks``) hides: the scripts' folder stands in while it imports."""
    path = SCRIPTS / f"{name}.py"
    shadowing = {key: sys.modules.pop(key) for key in list(sys.modules)
                 if key == "benchmarks" or key.startswith("benchmarks.")}
    scripts = types.ModuleType("benchmarks")
    scripts.__path__ = [str(SCRIPTS)]
    sys.modules["benchmarks"] = scripts
    spec = importlib.util.spec_from_file_location(f"{name}_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        for key in [k for k in sys.modules if k == "benchmarks" or k.startswith("benchmarks.")]:
            del sys.modules[key]
        sys.modules.update(shadowing)
    return module
