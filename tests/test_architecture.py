"""The package's shape: no import cycles between modules or between packages, views independent of objectives
and training, methods dispatched only by the registry, every package shipped, ``hub/`` independent of
the packages above it (``models/`` writes cards through it) and of the package root.

Everything here reads the source with :mod:`ast` (nothing is imported but the registry), so an import
hidden inside a function counts like one at the top of a module.
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hf_contrast"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


@cache
def _modules() -> dict[str, Path]:
    """``{dotted name: file}`` of every module of the package."""
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: module level, in functions and classes; not under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if _is_type_checking_block(node):
            for child in node.orelse:  # type: ignore[attr-defined]
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _resolve(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The package modules an import statement loads (the package ``__init__`` and, for
    ``from package import submodule``, the submodule)."""
    modules = _modules()
    if isinstance(node, ast.Import):
        targets = {alias.name for alias in node.names}
    else:
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        targets = {prefix} | {f"{prefix}.{alias.name}" for alias in node.names}
    resolved = set()
    for target in targets:
        while target and target not in modules:  # `import hf_contrast.a.b` loads a.b; a name in a module: that module
            target = target.rpartition(".")[0]
        if target.startswith("hf_contrast"):
            resolved.add(target)
    return resolved


@cache
def _import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges: set[str] = set()
        for node in _runtime_imports(tree):
            edges |= _resolve(name, path.name == "__init__.py", node)
        edges.discard(name)
        graph[name] = edges
    return graph


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (a list of modules, first == last), or ``None``."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_graph_sees_every_module_and_function_level_imports() -> None:
    graph = _import_graph()
    assert "hf_contrast.training.trainer" in graph and "hf_contrast.objectives.registry" in graph
    assert "hf_contrast.objectives" in graph["hf_contrast.training.trainer"]
    # the finder itself: a function-level import is an edge, a TYPE_CHECKING one is not
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\ndef f():\n    import b\n")
    assert [alias.name for node in _runtime_imports(tree) for alias in node.names] == ["TYPE_CHECKING", "b"]
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycles() -> None:
    cycle = _find_cycle(_import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def _package_of(module: str) -> str:
    """The package-level node of a module: ``hf_contrast.<X>`` for anything in subpackage (or top-level
    module) ``X``, ``hf_contrast`` for the package root."""
    return ".".join(module.split(".")[:2])


def _package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """``{package: packages it imports}``: every module-level edge (function-level imports included,
    ``TYPE_CHECKING`` ones excluded) lifted to the packages of its two ends."""
    packages: dict[str, set[str]] = {}
    for module, edges in graph.items():
        source = _package_of(module)
        packages.setdefault(source, set()).update(p for p in map(_package_of, edges) if p != source)
    return packages


def test_the_package_graph_lifts_module_edges() -> None:
    graph = {
        "hf_contrast.a.x": {"hf_contrast.b.y"},
        "hf_contrast.b.y": {"hf_contrast.b.z"},
        "hf_contrast.b.z": {"hf_contrast.a"},  # two modules, no module cycle, but a ↔ b
        "hf_contrast.a": set(),
        "hf_contrast.c": {"hf_contrast.a.x"},
    }
    assert _find_cycle(graph) is None
    packages = _package_graph(graph)
    assert packages == {
        "hf_contrast.a": {"hf_contrast.b"},
        "hf_contrast.b": {"hf_contrast.a"},
        "hf_contrast.c": {"hf_contrast.a"},
    }
    assert _find_cycle(packages) == ["hf_contrast.a", "hf_contrast.b", "hf_contrast.a"]
    assert _package_graph(_import_graph())["hf_contrast.training"] >= {"hf_contrast.objectives", "hf_contrast.views"}


def test_no_package_import_cycles() -> None:
    """Subpackages depend one way (e.g. views <- objectives <- training), even through imports inside functions."""
    cycle = _find_cycle(_package_graph(_import_graph()))
    assert cycle is None, "package-level import cycle: " + " -> ".join(cycle or [])


def test_views_depend_on_neither_objectives_nor_training() -> None:
    packages = _package_graph(_import_graph())
    assert "hf_contrast.views" in packages
    bad = packages["hf_contrast.views"] & {"hf_contrast.objectives", "hf_contrast.training"}
    assert not bad, (
        f"hf_contrast.views imports {sorted(bad)}: objectives and training depend on views, never the reverse"
    )
    assert "hf_contrast.training" not in packages["hf_contrast.objectives"], "objectives must not import training"


# Lazy loaders (`import_module` in a module `__getattr__`) load modules this graph cannot see, so they could hide a
# cycle. Allowed only where import time needs them: the package root (`import hf_contrast` stays cheap; nothing in
# the package needs a name from it) and metrics (`evaluate` takes seconds to import; targets inside metrics/).
LAZY_LOADERS = {"hf_contrast", "hf_contrast.metrics"}


def test_lazy_loaders_only_where_import_time_needs_them() -> None:
    found = set()
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", None)) == "import_module"
            ):
                found.add(name)
    assert found <= LAZY_LOADERS, f"lazy imports hide edges from the import graph: {sorted(found - LAZY_LOADERS)}"


def _imports_of(prefix: str) -> dict[str, set[str]]:
    return {name: edges for name, edges in _import_graph().items() if name == prefix or name.startswith(prefix + ".")}


# What hub/ sits below: it works on duck-typed encoders and trainers and never imports these.
_ABOVE_HUB = ("metrics", "views", "evaluation", "models", "objectives", "training", "plots")


def test_hub_never_imports_the_packages_above_it_or_the_package_root() -> None:
    hub = _imports_of("hf_contrast.hub")
    assert hub, "no hf_contrast.hub modules found"
    above = tuple(f"hf_contrast.{package}" for package in _ABOVE_HUB)
    for name, edges in hub.items():
        bad = {e for e in edges if e == "hf_contrast" or e in above or e.startswith(tuple(p + "." for p in above))}
        assert not bad, f"{name} imports {sorted(bad)}: models/ depends on hub/, never the reverse"


# ---- method names are dispatched only by the registry ------------------------------------------


def _method_names() -> set[str]:
    from hf_contrast.objectives import available_objectives

    return set(available_objectives())


def _string_constants(node: ast.AST) -> list[str]:
    """String constants of ``node``: a literal, or the items of a literal tuple/list/set."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def method_name_dispatch(source: str, names: set[str]) -> list[tuple[int, str]]:
    """``(line, method name)`` where ``source`` branches on a method name: a comparison (``==``, ``!=``,
    ``in``, ``not in``) with a literal name or a literal collection holding one, a ``match`` case on
    one, or a dict literal keyed by two or more method names (a dispatch table)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            if not all(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops):
                continue
            for operand in [node.left, *node.comparators]:
                found += [(node.lineno, s) for s in _string_constants(operand) if s in names]
        elif isinstance(node, ast.match_case):
            for pattern in ast.walk(node.pattern):
                if isinstance(pattern, ast.MatchValue):
                    found += [(node.pattern.lineno, s) for s in _string_constants(pattern.value) if s in names]
        elif isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
            hits = [k for k in keys if k in names]
            if len(hits) >= 2:
                found += [(node.lineno, k) for k in hits]
    return found


def test_the_dispatch_finder_finds_what_it_should() -> None:
    names = {"care", "simclr", "ocl"}
    source = (
        'if method == "care": pass\n'
        'if loss in ("simclr", "vicreg"): pass\n'
        'table = {"care": 1, "ocl": 2}\n'
        'match m:\n    case "ocl": pass\n'
        'label = "care"\n'  # a plain string: not a branch
        'options = {"care": 1, "other": 2}\n'  # one method key: not a dispatch table
        'choices = ["care", "simclr"]\n'
    )
    assert method_name_dispatch(source, names) == [(1, "care"), (2, "simclr"), (3, "care"), (3, "ocl"), (5, "ocl")]


# Loss-level names that coincide with method names, allowed in these files only (any other name fails).
ALLOWED = {
    # LOCALLoss(contrastive="ocl"|"supcon") picks the loss *function* of its contrastive term: a loss option.
    "hf_contrast/losses/local.py": {"ocl", "supcon"},
    # the loss benchmark's table rows are loss functions (docs/methods.md names), timed and annotated by name.
    "benchmarks/bench_losses.py": {"simo", "spectral", "vicreg"},
    # the real-data benchmark's run table: run names, each an example command line that passes `--method`.
    "benchmarks/real_data.py": {"care", "simclr", "simo", "ocl", "supcon"},
}


def _sources_outside_the_registry() -> list[Path]:
    files = [p for p in sorted(PACKAGE.rglob("*.py")) if "objectives" not in p.relative_to(PACKAGE).parts]
    for folder in ("examples", "benchmarks"):
        files += sorted((ROOT / folder).rglob("*.py"))
    return files


@pytest.mark.parametrize("path", _sources_outside_the_registry(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_method_name_dispatch_outside_the_objectives(path: Path) -> None:
    allowed = ALLOWED.get(path.relative_to(ROOT).as_posix(), set())
    hits = [
        (line, name)
        for line, name in method_name_dispatch(path.read_text(encoding="utf-8"), _method_names())
        if name not in allowed
    ]
    assert not hits, (
        f"{path.relative_to(ROOT)} branches on method names {hits}: resolve methods with "
        "hf_contrast.objectives.get_objective / build_objective and let the objective decide"
    )


# ---- packaging ---------------------------------------------------------------------------------


def test_pyproject_ships_every_package_and_the_model_cards() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = {_module_name(p) for p in PACKAGE.rglob("__init__.py")}
    assert on_disk - listed == set(), f"packages missing from pyproject.toml: {sorted(on_disk - listed)}"
    assert "hf_contrast.model_cards" in listed
    assert config["package-dir"]["hf_contrast.model_cards"] == "model_cards" and (ROOT / "model_cards").is_dir()
    stale = {p for p in listed - on_disk if p != "hf_contrast.model_cards"}
    assert not stale, f"pyproject.toml lists packages that do not exist: {sorted(stale)}"
