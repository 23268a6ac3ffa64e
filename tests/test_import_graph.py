"""The package's import structure: no cycles, the environment stands alone, layers point down.

Every module of ``agentgrpo/`` is parsed with ``ast`` (nothing is imported) and each of its
imports becomes an edge of a module graph; the scripts of ``examples/`` and ``benchmarks/``
(and the Python inside their shell scripts) are read the same way. How an import counts:

* at module level or inside a function (a lazy import): an edge. A lazy import still
  runs, so it may neither close a cycle nor reach up a layer; deferring it is for start-up
  time (torch, transformers), never for hiding a dependency.
* under ``if TYPE_CHECKING:``: an edge for the layer rule (a type names a dependency),
  but not for cycles (it never runs, so two modules may name each other's types).
* by name: in a module that calls ``import_module``, every string that is exactly a module
  name of the package (``"agentgrpo.envs.airline.spec"``, ``"agentgrpo.train.cli:register_sft"``:
  the command line's subcommand table, the domain registry, lazy exports) is an edge of kind
  ``importlib``. It counts for the layers like any import. It does not count for cycles: the
  table is data naming what is loaded on demand, and the loaded module depending on its loader
  (a domain implementing the registry's protocol) is the direction the layers want.

The examples and benchmarks sit above the whole package, as a user's code does: they may
import any module, but reach an environment family only through ``agentgrpo.envs.registry``,
never a domain package (``agentgrpo.envs.airline``, ``agentgrpo.envs.toy``) itself; neither
does any module of the package outside ``agentgrpo/envs``.

The layers, bottom to top (docs/development.md draws the same map). The foundation is
every top-level module of ``agentgrpo`` other than the command line: settings, errors and
generic helpers that import only one another. Above it, each package may import the
foundation, its own modules and the packages of lower layers; packages of one layer never
import each other.
"""
from __future__ import annotations

import ast
import re
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIR = ROOT / "agentgrpo"
SCRIPT_DIRS = ("examples", "benchmarks")
DOMAIN_PACKAGES = tuple(sorted(f"agentgrpo.envs.{p.name}" for p in (PACKAGE_DIR / "envs").iterdir()
                               if (p / "__init__.py").is_file()))
"""The environment families' packages: only ``agentgrpo/envs`` reaches them, through the registry."""
MODULE_NAME = re.compile(r"agentgrpo(?:\.[A-Za-z_]\w*)+(?::\w+)?")
SHELL_IMPORT = re.compile(r"^\s*(?:from\s+(agentgrpo[\w.]*)\s+import\s+([\w, ()]+)|import\s+(agentgrpo[\w.]*))")

FOUNDATION = "foundation"
COMMAND_LINE = ("cli", "__main__")
LAYERS: tuple[tuple[str, ...], ...] = (
    (FOUNDATION,),  # config, endpoint, openai_client, preflight, progress, tracking, ...
    ("envs", "algos"),  # environments (no torch) | pure torch math
    ("agent",),  # chat format, trajectory types
    ("policy", "rewards"),  # model backends | outcome and PRM-Lite
    ("rollout",),  # batched multi-turn episodes
    ("train", "eval"),  # SFT and GRPO | pass^k evaluation
    ("diagnose", "report"),  # read runs' metrics and evaluations
    ("jobs", "integrations", "serve"),  # whole pipelines | veRL, TRL | HTTP server
    (COMMAND_LINE,),
)
"""Bottom to top. A package may import the packages of the layers below its own."""

ENV_FORBIDDEN_THIRD_PARTY = ("torch", "transformers", "peft")


class Import:
    """One import statement's edge: ``source`` imports ``target`` at ``line``."""

    def __init__(self, source: str, target: str, line: int, kind: str):
        self.source, self.target, self.line, self.kind = source, target, line, kind

    def __repr__(self) -> str:
        return f"{self.source}:{self.line} -> {self.target} ({self.kind})"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py"))}


def _targets(node: ast.Import | ast.ImportFrom, source: str) -> list[str]:
    """Absolute names of what one statement imports (``from P import m`` names the module P.m)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level and source not in modules():  # a script's relative import: not the package's
        return [base]
    if node.level:  # relative: resolved against the importing module's package
        package = source.split(".") if modules()[source].name == "__init__.py" else source.split(".")[:-1]
        base = ".".join([*package[: len(package) - node.level + 1], *([node.module] if node.module else [])])
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in modules() else base for a in node.names]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST, source: str, kind: str, found: list[Import]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for statement in child.body:
                _walk(ast.Module(body=[statement], type_ignores=[]), source, "type_checking", found)
            for statement in child.orelse:
                _walk(ast.Module(body=[statement], type_ignores=[]), source, kind, found)
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            found.extend(Import(source, target, child.lineno, kind) for target in _targets(child, source))
        inner = "lazy" if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and kind == "module" else kind
        _walk(child, source, inner, found)


def _by_name(tree: ast.AST, source: str) -> list[Import]:
    """The package modules a module that calls ``import_module`` names in its strings."""
    calls = any(isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
        or (isinstance(node.func, ast.Name) and node.func.id == "import_module")) for node in ast.walk(tree))
    if not calls:
        return []
    return [Import(source, node.value.partition(":")[0], node.lineno, "importlib") for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_NAME.fullmatch(node.value)]


def _read(tree: ast.AST, source: str) -> list[Import]:
    found: list[Import] = []
    _walk(tree, source, "module", found)
    return found + _by_name(tree, source)


@cache
def imports() -> tuple[Import, ...]:
    """Every import of every module (third-party ones too)."""
    return tuple(i for name, path in modules().items() for i in _read(ast.parse(path.read_text(), str(path)), name))


def _shell_imports(path: Path, source: str) -> list[Import]:
    """The ``agentgrpo`` imports of the Python a shell script runs (line by line: heredocs, ``-c``)."""
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        match = SHELL_IMPORT.match(line)
        if match and match.group(3):
            found.append(Import(source, match.group(3), number, "module"))
        elif match:
            base = match.group(1)
            names = [n.strip() for n in match.group(2).strip("() ").split(",") if n.strip()]
            found += [Import(source, f"{base}.{n}" if f"{base}.{n}" in modules() else base, number, "module")
                      for n in names]
    return found


@cache
def script_imports() -> tuple[Import, ...]:
    """The ``agentgrpo`` imports of every script of ``examples/`` and ``benchmarks/`` (source: its path)."""
    found: list[Import] = []
    for folder in SCRIPT_DIRS:
        for path in sorted((ROOT / folder).rglob("*")):
            source = str(path.relative_to(ROOT))
            if path.suffix == ".py":
                found += _read(ast.parse(path.read_text(encoding="utf-8"), str(path)), source)
            elif path.suffix == ".sh":
                found += _shell_imports(path, source)
    return tuple(i for i in found if i.target == "agentgrpo" or i.target.startswith("agentgrpo."))


def internal_imports() -> list[Import]:
    return [i for i in imports() if i.target == "agentgrpo" or i.target.startswith("agentgrpo.")]


def package_of(module: str) -> str:
    """``envs`` for agentgrpo.envs.airline.cli; FOUNDATION for agentgrpo.config; ``cli`` for the command line."""
    parts = module.split(".")
    if len(parts) == 1:
        return FOUNDATION  # the root package: __version__
    if parts[1] in COMMAND_LINE:
        return COMMAND_LINE
    return parts[1] if (PACKAGE_DIR / parts[1]).is_dir() else FOUNDATION


def layer_of(package: str) -> int:
    for index, layer in enumerate(LAYERS):
        if package in layer:
            return index
    raise KeyError(package)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path whose first and last node are the same, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


# ---- the reader itself ---------------------------------------------------------------------
def test_every_internal_import_names_a_module_that_exists():
    """Also the modules a table names for ``import_module`` and the ones scripts import."""
    missing = [i for i in [*internal_imports(), *script_imports()] if i.target not in modules()]
    assert missing == []


def test_the_reader_sees_lazy_type_checking_by_name_and_script_imports():
    """Known statements of each kind, so a broken walker cannot pass the rules below vacuously."""
    kinds = {(i.source, i.target): i.kind for i in internal_imports()}
    assert kinds[("agentgrpo.agent.types", "agentgrpo.envs.types")] == "type_checking"
    assert kinds[("agentgrpo.eval.runner", "agentgrpo.rollout.engine")] == "lazy"
    assert kinds[("agentgrpo.eval.evaluator", "agentgrpo.eval.runner")] == "module"
    assert kinds[("agentgrpo.envs.registry", "agentgrpo.envs.airline.spec")] == "importlib"
    assert kinds[("agentgrpo.cli", "agentgrpo.train.cli")] == "importlib"
    assert len(modules()) > 100 and len(internal_imports()) > 500
    scripts = {(i.source, i.target): i.kind for i in script_imports()}
    assert scripts[("benchmarks/_common.py", "agentgrpo.envs.registry")] == "module"
    assert scripts[("examples/trl/train_airline.py", "agentgrpo.envs.registry")] == "module"
    assert scripts[("examples/verl/gpu_check.sh", "agentgrpo.envs.registry")] == "module"
    assert len({i.source for i in script_imports()}) > 15


def test_by_name_and_shell_readers_on_hand_made_sources(tmp_path):
    table = ast.parse('import importlib\nTABLE = {"a": "agentgrpo.envs.toy.spec:TOY", "b": "agentgrpo"}\n'
                      'def load(k):\n    return importlib.import_module(TABLE[k])\n')
    assert [(i.target, i.kind) for i in _by_name(table, "x")] == [("agentgrpo.envs.toy.spec", "importlib")]
    assert _by_name(ast.parse('NAME = "agentgrpo.envs.toy.spec"\n'), "x") == []  # nothing is loaded by name
    script = tmp_path / "run.sh"
    script.write_text('python - <<EOF\nfrom agentgrpo.envs import registry\n  import agentgrpo.config\n'
                      'from agentgrpo.policy.hf import (load_policy,\nEOF\necho "from agentgrpo"\n')
    assert [(i.target, i.line) for i in _shell_imports(script, "run.sh")] == [
        ("agentgrpo.envs.registry", 2), ("agentgrpo.config", 3), ("agentgrpo.policy.hf", 4)]


def test_find_cycle_on_hand_made_graphs():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


# ---- (a) no cycle ----------------------------------------------------------------------------
def test_no_import_cycle_counting_lazy_imports():
    """A cycle through a function-level import is still a cycle; only TYPE_CHECKING names are free."""
    graph: dict[str, set[str]] = defaultdict(set)
    for i in internal_imports():
        if i.kind not in ("type_checking", "importlib") and i.target != i.source:
            graph[i.source].add(i.target)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


# ---- (b) the environment and the algorithms stand alone -------------------------------------
def test_envs_import_only_the_foundation_and_no_torch():
    """``agentgrpo/envs`` never imports policy, train, eval, rollout, algos, agent... nor torch."""
    bad = [i for i in imports() if package_of(i.source) == "envs" and (
        (i.target.startswith("agentgrpo") and package_of(i.target) not in ("envs", FOUNDATION))
        or i.target.split(".")[0] in ENV_FORBIDDEN_THIRD_PARTY)]
    assert bad == []


def test_algos_import_nothing_else_of_the_package():
    bad = [i for i in internal_imports() if package_of(i.source) == "algos" and package_of(i.target) != "algos"]
    assert bad == []


# ---- (c) layers point down -------------------------------------------------------------------
def test_every_package_has_a_layer():
    packages = {package_of(name) for name in modules()}
    unplaced = sorted(str(p) for p in packages if not any(p in layer for layer in LAYERS))
    assert unplaced == [], "add these to LAYERS (and to docs/development.md)"


@pytest.mark.parametrize("layer", [p for layer in LAYERS for p in layer if p != FOUNDATION], ids=str)
def test_layer_imports_only_lower_layers(layer):
    """Each import from ``layer`` goes to itself, the foundation or a package of a lower layer."""
    bad = []
    for i in internal_imports():
        source, target = package_of(i.source), package_of(i.target)
        if source == layer and target not in (source, FOUNDATION) and layer_of(target) >= layer_of(source):
            bad.append(i)
    assert bad == []


def test_the_foundation_imports_only_itself():
    bad = [i for i in internal_imports() if package_of(i.source) == FOUNDATION and package_of(i.target) != FOUNDATION]
    assert bad == []


# ---- (d) a domain is reached through the registry, by the package and by its users ----------
def _domain_of(target: str) -> str | None:
    return next((d for d in DOMAIN_PACKAGES if target == d or target.startswith(d + ".")), None)


def test_the_domain_packages_are_found():
    assert "agentgrpo.envs.airline" in DOMAIN_PACKAGES and "agentgrpo.envs.toy" in DOMAIN_PACKAGES


def test_only_the_environment_package_imports_a_domain_package():
    bad = [i for i in internal_imports() if package_of(i.source) != "envs" and _domain_of(i.target)]
    assert bad == []


def test_examples_and_benchmarks_reach_a_domain_only_through_the_registry():
    """As a user would: ``agentgrpo.envs.registry`` (``build_env``, ``make_env``, ``domain_oracle``...)
    and the domain-free ``agentgrpo.envs`` modules, never ``agentgrpo.envs.airline`` itself."""
    bad = [i for i in script_imports() if _domain_of(i.target)]
    assert bad == []
