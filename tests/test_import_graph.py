"""The package's import structure: no cycles, the environment stands alone, layers point down.

Every module of ``agentgrpo/`` is parsed with ``ast`` (nothing is imported) and each of its
imports becomes an edge of a module graph. How an import counts:

* at module level or inside a function (a lazy import): an edge. A lazy import still
  runs, so it may neither close a cycle nor reach up a layer; deferring it is for start-up
  time (torch, transformers), never for hiding a dependency.
* under ``if TYPE_CHECKING:``: an edge for the layer rule (a type names a dependency),
  but not for cycles (it never runs, so two modules may name each other's types).
* ``importlib.import_module("...")`` with a computed name is not seen: the command line's
  subcommand table and a registry's domain packages are loaded that way, downward.

The layers, bottom to top (docs/development.md draws the same map). The foundation is
every top-level module of ``agentgrpo`` other than the command line: settings, errors and
generic helpers that import only one another. Above it, each package may import the
foundation, its own modules and the packages of lower layers; packages of one layer never
import each other.
"""
from __future__ import annotations

import ast
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "agentgrpo"

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


@cache
def imports() -> tuple[Import, ...]:
    """Every import of every module (third-party ones too)."""
    found: list[Import] = []
    for name, path in modules().items():
        _walk(ast.parse(path.read_text(), filename=str(path)), name, "module", found)
    return tuple(found)


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
    missing = [i for i in internal_imports() if i.target not in modules()]
    assert missing == []


def test_the_reader_sees_lazy_and_type_checking_imports():
    """Known statements of three kinds, so a broken walker cannot pass the rules below vacuously."""
    kinds = {(i.source, i.target): i.kind for i in internal_imports()}
    assert kinds[("agentgrpo.agent.types", "agentgrpo.envs.types")] == "type_checking"
    assert kinds[("agentgrpo.eval.runner", "agentgrpo.rollout.engine")] == "lazy"
    assert kinds[("agentgrpo.eval.evaluator", "agentgrpo.eval.runner")] == "module"
    assert len(modules()) > 100 and len(internal_imports()) > 500


def test_find_cycle_on_hand_made_graphs():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


# ---- (a) no cycle ----------------------------------------------------------------------------
def test_no_import_cycle_counting_lazy_imports():
    """A cycle through a function-level import is still a cycle; only TYPE_CHECKING names are free."""
    graph: dict[str, set[str]] = defaultdict(set)
    for i in internal_imports():
        if i.kind != "type_checking" and i.target != i.source:
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
