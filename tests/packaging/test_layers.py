"""The packages' layers import only downward, with no cycles and no private names across
packages (docs/architecture.md, "Layers").  Read from the source of ``ratelnn/`` and
``agraph/`` with ``ast``: every ``import``/``from ... import`` (at module level or inside
functions) and every ``importlib.import_module("ratelnn...")`` literal counts.

Cycles are counted at two levels:

- modules: a node per ``.py`` file (a package is its ``__init__``), an edge A -> B when A
  imports B or a name of B;
- packages: a node per subpackage of a root, its subpackages collapsed into it
  (``ratelnn.frontend``, ``ratelnn.ir``, ``agraph.models``), per top-level module
  (``ratelnn.convert``, ``ratelnn.tune``, ``agraph.flow``) and per root facade
  (``ratelnn``, ``agraph``: their ``__init__``); an edge A -> B when any module of A imports
  any module of B.

Entry points (the root facades, the CLI, ``ratelnn.testing``) are nodes like the others: they
import everything and nothing imports them, so they close no cycle.  There must be none at
either level."""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from helpers.paths import REPO

# reads source files only (tests/conftest.py)
pytestmark = pytest.mark.no_tf_math

ROOTS = ("ratelnn", "agraph")

# Lowest first.  A module's layer is that of the longest prefix listed; an import may go to
# the same layer or below.  The entry points may import everything, nothing imports them:
# `ratelnn.testing`, the CLI and the root facade (`ratelnn`); the model zoo (`agraph`) sits
# above the whole SDK.
LAYERS = [
    ("base", ["ratelnn.errors", "ratelnn.gc_pause", "ratelnn.config", "ratelnn.config_forms", "ratelnn.config_ascend", "ratelnn.amct_config", "ratelnn.config_tables", "ratelnn.fileio", "ratelnn._build", "ratelnn.frameworks", "ratelnn.mxnet_compat",
              "ratelnn.proto", "ratelnn.oplib", "ratelnn.runners", "ratelnn.datasets", "ratelnn.metrics"]),
    ("ir", ["ratelnn.ir"]),
    ("calibration, quantization", ["ratelnn.calibration", "ratelnn.quantization"]),
    ("npu", ["ratelnn.npu"]),
    ("compiler", ["ratelnn.compiler"]),
    ("api", ["ratelnn.model_handler", "ratelnn.convert", "ratelnn.analysis", "ratelnn.ratelnn_runtime",
             "ratelnn.distributed", "ratelnn.tune"]),
    ("joint", ["ratelnn.joint"]),
    ("frontend", ["ratelnn.frontend"]),
    ("profiling", ["ratelnn.profile"]),
    ("entry points", ["ratelnn.cli", "ratelnn.__main__", "ratelnn.testing"]),
    ("model zoo", ["agraph"]),
]
FACADES = {"ratelnn"}
ENTRY = [name for name, _ in LAYERS].index("entry points")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for root in ROOTS for p in (REPO / root).rglob("*.py")}


def layer_of(module: str) -> int:
    if module in FACADES:
        return ENTRY
    best, best_len = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    assert best is not None, f"{module} is in no layer: add it to LAYERS (and docs/architecture.md)"
    return best


def unit_of(module: str) -> str:
    """The package-level node: <root>.<first part> (a subpackage or a top-level module), or
    the root facade itself."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def resolve(importer: str, is_package: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def ours(name: str) -> bool:
    return name.split(".")[0] in ROOTS


def imports_of(module: str, path: Path):
    """``(target module, imported names, line)`` for every ratelnn or agraph import in ``module``."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, [], node.lineno) for a in node.names if ours(a.name)]
        elif isinstance(node, ast.ImportFrom):
            base = resolve(module, is_package, node.level, node.module)
            if not ours(base):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append((sub, [], node.lineno) if sub in MODULES else (base, [alias.name], node.lineno))
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and ours(str(node.args[0].value))):
            found.append((node.args[0].value, [], node.lineno))
    return found


def crosses_into_sdk(importer: str, target: str) -> bool:
    """Whether ``importer`` reaching into ``target`` must use public names only: across
    packages, where either side is in ratelnn (the zoo's own modules share helpers freely)."""
    return unit_of(importer) != unit_of(target) and "ratelnn" in (importer.split(".")[0], target.split(".")[0])


def private_attribute_uses(module: str, path: Path):
    """``module._name`` reads where ``module`` is a module of another package."""
    tree = ast.parse(path.read_text(), str(path))
    aliases = {}
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = resolve(module, is_package, node.level, node.module)
            for alias in node.names:
                if f"{base}.{alias.name}" in MODULES:
                    aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES and alias.asname:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            target = aliases[node.value.id]
            if crosses_into_sdk(module, target):
                yield f"{module} reads {target}.{node.attr}"


EDGES = {m: imports_of(m, p) for m, p in MODULES.items()}


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


def test_imports_only_run_downward():
    upward = []
    for module, found in EDGES.items():
        for target, _, line in found:
            if target in MODULES and layer_of(target) > layer_of(module):
                upward.append(f"{module}:{line} imports {target} "
                              f"({LAYERS[layer_of(module)][0]} -> {LAYERS[layer_of(target)][0]})")
    assert upward == []


def test_no_private_names_across_packages():
    """ratelnn's packages, and agraph reaching into ratelnn, use each other's public names."""
    private = []
    for module, found in EDGES.items():
        for target, names, line in found:
            if crosses_into_sdk(module, target):
                private += [f"{module}:{line} imports {target}.{n}" for n in names if n.startswith("_")]
        private += list(private_attribute_uses(module, MODULES[module]))
    assert private == []


def _cycles(graph):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on_stack, result, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                result.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return result


def import_graph(level: str):
    """The import graph of both roots at ``level`` ("module" or "package", see the module
    docstring): node -> the nodes it imports."""
    graph = defaultdict(set)
    for module, found in EDGES.items():
        for target, _, _ in found:
            assert target in MODULES, f"{module} imports {target}, which is no module of {ROOTS}"
            a, b = (unit_of(module), unit_of(target)) if level == "package" else (module, target)
            if a != b:
                graph[a].add(b)
    return graph


@pytest.mark.parametrize("level", ["package", "module"])
def test_no_import_cycles(level):
    graph = import_graph(level)
    assert {"ratelnn.frontend", "ratelnn.convert", "agraph.flow"} & set(graph)   # both roots read
    assert _cycles(graph) == []


def test_test_modules_share_code_only_through_helpers():
    """tests/<layer>/test_*.py import shared code from tests/helpers, never from each other."""
    tests_dir = REPO / "tests"
    names = {p.stem for p in tests_dir.rglob("test_*.py")}
    offenders = []
    for path in tests_dir.rglob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            offenders += [f"{path.relative_to(tests_dir)} imports {m}" for m in modules if m.split(".")[0] in names]
    assert offenders == []


def test_ratelnn_never_imports_agraph():
    """agraph (the model zoo) sits above the SDK: it imports ratelnn, never the reverse."""
    found = []
    for module, path in MODULES.items():
        if module.split(".")[0] != "ratelnn":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            found += [f"{module}:{node.lineno} imports {n}" for n in names if n.split(".")[0] == "agraph"]
    assert found == []
