"""The package's shape: layers that only look down (:data:`LAYERS`, written out in ``docs/architecture.md``), no
private module or name used across packages, no import cycles between modules or between packages, methods
dispatched only by the registry, every package shipped.

Everything here reads the source with :mod:`ast` (nothing is imported but the registry), so an import
hidden inside a function counts like one at the top of a module.
"""

from __future__ import annotations

import ast
import re
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


def _from_module(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute name of the module a ``from ... import`` statement of ``module`` imports from."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _resolve(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The package modules an import statement loads (the package ``__init__`` and, for
    ``from package import submodule``, the submodule)."""
    modules = _modules()
    if isinstance(node, ast.Import):
        targets = {alias.name for alias in node.names}
    else:
        prefix = _from_module(module, is_package, node)
        targets = {prefix} | {f"{prefix}.{alias.name}" for alias in node.names}
    resolved = set()
    for target in targets:
        while target and target not in modules:  # `import hf_contrast.a.b` loads a.b; a name in a module: that module
            target = target.rpartition(".")[0]
        if target.startswith("hf_contrast"):
            resolved.add(target)
    return resolved


@cache
def _import_lines() -> dict[str, dict[str, int]]:
    """``{module: {module it imports: line of the first such import}}`` (function-level imports included)."""
    lines: dict[str, dict[str, int]] = {}
    for name, path in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges: dict[str, int] = {}
        for node in _runtime_imports(tree):
            for target in _resolve(name, path.name == "__init__.py", node):
                edges.setdefault(target, node.lineno)
        edges.pop(name, None)
        lines[name] = edges
    return lines


@cache
def _import_graph() -> dict[str, set[str]]:
    return {name: set(edges) for name, edges in _import_lines().items()}


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


# ---- layers: a module imports only from its own layer or a lower one -----------------------------

# The layer order, lowest first: each entry is a top-level module or subpackage of hf_contrast (``hf_contrast.<entry>``
# and everything under it). A module may import from its own layer and from lower ones, never from a higher one or
# from the package root (``hf_contrast/__init__.py``, above every layer), function-level imports included.
# docs/architecture.md ("Layers") writes out the same list; test_the_documented_layers_are_the_declared_ones keeps
# the two equal.
LAYERS = (
    "errors",
    "moved_modules",
    "tensor_checks",
    "seeding",
    "distributed",
    "hub_ids",
    "provenance",
    "progress",
    "losses",
    "data",
    "hub",
    "metrics",
    "views",
    "encoding",
    "models",
    "objectives",
    "training",
    "evaluation",
    "plots",
)
# Top-level modules that belong to another entry's layer (none today: the model card lives in hub/).
LAYER_OF: dict[str, str] = {}
ROOT_LAYER = "the package root"
# Imports that break the order today, each to be removed by the change named beside it (a stale entry fails too).
KNOWN_UPWARD_IMPORTS: set[tuple[str, str]] = set()


def _layer(module: str) -> str:
    """The layer of a package module: its :data:`LAYERS` entry, or :data:`ROOT_LAYER` for ``hf_contrast`` itself."""
    parts = module.split(".")
    if len(parts) == 1:
        return ROOT_LAYER
    return LAYER_OF.get(parts[1], parts[1])


def _rank(layer: str) -> int:
    return len(LAYERS) if layer == ROOT_LAYER else LAYERS.index(layer)


def layer_violations(imports: dict[str, dict[str, int]]) -> list[str]:
    """One message per import (``{module: {imported module: line}}``) that goes up or sideways in
    :data:`LAYERS`, naming both modules and both layers."""
    found = []
    for module, edges in sorted(imports.items()):
        source = _layer(module)
        for target, line in sorted(edges.items()):
            layer = _layer(target)
            if layer != source and _rank(layer) >= _rank(source):
                found.append(
                    f"{module} (layer {source!r}, line {line}) imports {target} (layer {layer!r}): a module imports "
                    "only from its own layer or a lower one (LAYERS in tests/test_architecture.py)"
                )
    return found


def test_the_layer_finder_finds_upward_and_root_imports() -> None:
    imports = {
        "hf_contrast.losses.info_nce": {"hf_contrast.errors": 3, "hf_contrast.training.trainer": 40},
        "hf_contrast.models.modeling": {"hf_contrast.hub.card_render": 5, "hf_contrast.losses": 6},
        "hf_contrast.hub.push": {"hf_contrast.hub.upload": 2, "hf_contrast.models": 9},
        "hf_contrast.views.afcl_sampler": {"hf_contrast": 19, "hf_contrast.views.builder": 20},
    }
    assert layer_violations(imports) == [
        "hf_contrast.hub.push (layer 'hub', line 9) imports hf_contrast.models (layer 'models'): a module imports "
        "only from its own layer or a lower one (LAYERS in tests/test_architecture.py)",
        "hf_contrast.losses.info_nce (layer 'losses', line 40) imports hf_contrast.training.trainer (layer "
        "'training'): a module imports only from its own layer or a lower one (LAYERS in tests/test_architecture.py)",
        "hf_contrast.views.afcl_sampler (layer 'views', line 19) imports hf_contrast (layer 'the package root'): a "
        "module imports only from its own layer or a lower one (LAYERS in tests/test_architecture.py)",
    ]


def test_every_module_has_a_layer() -> None:
    unplaced = sorted({_layer(m) for m in _modules()} - set(LAYERS) - {ROOT_LAYER})
    assert not unplaced, f"hf_contrast.<{unplaced}> are in no layer: add them to LAYERS and docs/architecture.md"
    assert len(set(LAYERS)) == len(LAYERS) and set(LAYER_OF.values()) <= set(LAYERS)


def test_imports_only_look_down_the_layers() -> None:
    lines = _import_lines()
    known = {edge for edge in KNOWN_UPWARD_IMPORTS if edge[1] in lines.get(edge[0], {})}
    assert known == KNOWN_UPWARD_IMPORTS, (
        f"these known upward imports are gone: remove them from KNOWN_UPWARD_IMPORTS: {KNOWN_UPWARD_IMPORTS - known}"
    )
    checked = {module: {t: n for t, n in edges.items() if (module, t) not in known} for module, edges in lines.items()}
    violations = layer_violations(checked)
    assert not violations, "imports that go up or sideways in the layers:\n" + "\n".join(violations)


def _private_scope(module: str) -> str | None:
    """The package a private module is private to (the part of its name before the first ``_name``), or ``None``."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def private_imports(module: str, is_package: bool, tree: ast.AST) -> list[str]:
    """One message per import in ``tree`` (the source of ``module``) of another package's private module
    (``hf_contrast.<package>._name``) or private name (``from hf_contrast.<package>.x import _name``)."""
    found = []

    def private_module(line: int, target: str, scope: str) -> None:
        if target.startswith("hf_contrast") and not _inside(module, scope):
            found.append(
                f"{module} (layer {_layer(module)!r}, line {line}) imports {target} (layer {_layer(target)!r}), "
                f"a module private to {scope}: make it public or move the code"
            )

    for node in _runtime_imports(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (scope := _private_scope(alias.name)) is not None:
                    private_module(node.lineno, alias.name, scope)
            continue
        source = _from_module(module, is_package, node)
        if (scope := _private_scope(source)) is not None:
            private_module(node.lineno, source, scope)
            continue
        for alias in node.names:
            if not alias.name.startswith("_") or alias.name.startswith("__"):
                continue
            if f"{source}.{alias.name}" in _modules():  # `from package import _module`
                private_module(node.lineno, f"{source}.{alias.name}", source)
            elif source.startswith("hf_contrast") and not _inside(module, _package_of(source)):
                found.append(
                    f"{module} (layer {_layer(module)!r}, line {node.lineno}) imports {alias.name} from {source} "
                    f"(layer {_layer(source)!r}), a name private to {_package_of(source)}: make it public"
                )
    return found


def test_the_private_import_finder_finds_what_it_should() -> None:
    source = (
        "from hf_contrast.metrics._inputs import as_pair\n"  # a private module of another package
        "from ..losses.info_nce import _info_nce_loss\n"  # a private name of another package
        "from ._helpers import x\n"  # the module's own package: fine
        "from .builder import _split\n"  # the module's own package: fine
        "from torch import _C\n"  # not the package's
        "def f():\n    import hf_contrast.views._common\n"  # function level: counts
    )
    assert private_imports("hf_contrast.views.image_views", False, ast.parse(source)) == [
        "hf_contrast.views.image_views (layer 'views', line 1) imports hf_contrast.metrics._inputs (layer 'metrics'), "
        "a module private to hf_contrast.metrics: make it public or move the code",
        "hf_contrast.views.image_views (layer 'views', line 2) imports _info_nce_loss from "
        "hf_contrast.losses.info_nce (layer 'losses'), a name private to hf_contrast.losses: make it public",
    ]


def test_no_module_imports_another_packages_private_modules_or_names() -> None:
    found = []
    for name, path in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found += private_imports(name, path.name == "__init__.py", tree)
    assert not found, "private modules or names used across packages:\n" + "\n".join(found)


def test_the_documented_layers_are_the_declared_ones() -> None:
    """docs/architecture.md lists :data:`LAYERS` between ``<!-- layers -->`` markers, one ``N. `entry` ...``
    item each."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert text.count("<!-- layers -->") == 1 and text.count("<!-- /layers -->") == 1, "no marked layer list"
    block = text.split("<!-- layers -->")[1].split("<!-- /layers -->")[0]
    documented = tuple(re.findall(r"^\d+\. `([a-z_]+)`", block, flags=re.MULTILINE))
    assert documented == LAYERS, f"docs/architecture.md lists the layers {documented}, the test declares {LAYERS}"
    for module, layer in LAYER_OF.items():
        assert re.search(rf"^\d+\. `{layer}`.*`{module}", block, flags=re.MULTILINE), (
            f"docs/architecture.md does not place `{module}` in layer `{layer}`"
        )


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
    # the convergence benchmark's run tables: run names, each an example command line that passes `--method`.
    "benchmarks/convergence.py": {
        "simclr",
        "care",
        "care_moco",
        "spectral",
        "vicreg",
        "binary_nce",
        "simo",
        "supcon",
        "ocl",
        "align_uniform",
    },
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


# ---- the training room -------------------------------------------------------------------------


def test_the_training_room_is_eight_modules_and_the_old_paths_still_import() -> None:
    """Issue 30: the trainer, its arguments, checkpointing, publishing, the per-step callbacks, the checks, the run
    set-up and the scripts' command line; the sixteen modules merged into them import from their old paths with a
    FutureWarning naming the new place, and give the very same objects."""
    import importlib
    import warnings

    import hf_contrast.training as training

    modules = sorted(p.stem for p in (PACKAGE / "training").glob("*.py") if p.stem != "__init__")
    assert modules == sorted(
        ["arguments", "callbacks", "checkpointing", "checks", "cli", "publishing", "run_setup", "trainer"]
    )
    moved = {
        "loss_terms": "LossTermTracker", "scripts": "run_main", "image_size": "choose_image_size",
        "trainers": "CARETrainer", "run_identity": "run_settings", "doors": "check_trainer_arguments",
    }  # fmt: skip
    assert set(moved) <= set(training._MOVED_MODULES) and len(training._MOVED_MODULES) == 16
    for old, name in moved.items():
        module = importlib.import_module(f"hf_contrast.training.{old}")
        said = rf"hf_contrast\.training\.{old} is now part of hf_contrast\.training\."
        with pytest.warns(FutureWarning, match=said):
            value = getattr(module, name)
        assert value is getattr(training._MOVED_MODULES[old], name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from hf_contrast.training.callbacks import LossTermTracker  # the new path: no warning

    assert LossTermTracker is training.callbacks.LossTermTracker


def test_the_evaluation_helpers_below_the_models_import_from_their_old_paths_with_a_warning() -> None:
    """Issue 30: ``encode_dataset`` (with what it reads of a model) sits below the models, ``EmbeddingMetrics`` and
    its warnings in ``metrics`` (below the objectives that choose it), so that ``evaluation`` is above ``training``;
    the old module paths give the very same objects, with a FutureWarning naming the new module, and the package
    path (``from hf_contrast.evaluation import EmbeddingMetrics``) without one."""
    import importlib
    import warnings

    import hf_contrast.encoding.encode
    import hf_contrast.encoding.model_access
    import hf_contrast.metrics.collapse
    import hf_contrast.metrics.embedding_metrics
    import hf_contrast.metrics.failures

    moved = {
        "encode": ("encode_dataset", hf_contrast.encoding.encode, True),
        "model_access": ("eval_mode", hf_contrast.encoding.model_access, False),
        "embedding_metrics": ("EmbeddingMetrics", hf_contrast.metrics.embedding_metrics, True),
        "collapse": ("RepresentationCollapseWarning", hf_contrast.metrics.collapse, True),
        "failures": ("metrics_or_nan", hf_contrast.metrics.failures, False),
    }
    for old, (name, new, exported) in moved.items():
        module = importlib.import_module(f"hf_contrast.evaluation.{old}")
        said = rf"^hf_contrast\.evaluation\.{old} is now part of {re.escape(new.__name__)}: import `{name}` from there"
        said += r" \(or from hf_contrast\.evaluation\)\.$" if exported else r"\.$"
        with pytest.warns(FutureWarning, match=said):
            value = getattr(module, name)
        assert value is getattr(new, name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from hf_contrast.evaluation import EmbeddingMetrics, encode_dataset

    assert EmbeddingMetrics is hf_contrast.metrics.embedding_metrics.EmbeddingMetrics
    assert encode_dataset is hf_contrast.encoding.encode.encode_dataset


def test_a_renamed_callback_still_imports_with_a_warning() -> None:
    import hf_contrast.training.callbacks as callbacks

    with pytest.warns(FutureWarning, match="`ZeroObjectiveGradients` is now `ObjectiveGradients`"):
        from hf_contrast.training.callbacks import ZeroObjectiveGradients
    assert ZeroObjectiveGradients is callbacks.ObjectiveGradients
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        callbacks.Nothing  # noqa: B018


def _trainer_overrides() -> dict[str, list[str]]:
    """``{Trainer method: [classes of ContrastiveTrainer's bases that define it]}``, ``__init__`` aside."""
    from transformers import Trainer

    from hf_contrast.training import ContrastiveTrainer

    overrides: dict[str, list[str]] = {}
    for cls in ContrastiveTrainer.__mro__:
        if cls in (Trainer, object) or issubclass(Trainer, cls):
            continue
        for name, value in vars(cls).items():
            if name != "__init__" and callable(value) and callable(getattr(Trainer, name, None)):
                overrides.setdefault(name, []).append(cls.__name__)
    return overrides


def test_each_trainer_method_is_overridden_in_one_place_and_the_docs_list_them() -> None:
    """``train``, ``save_model``, … each defined once among ContrastiveTrainer's classes (no mixin and trainer both
    overriding one method); the private overrides are sentence-transformers' four; docs/training.md's table of
    public overrides is exactly the list."""
    overrides = _trainer_overrides()
    twice = {name: where for name, where in overrides.items() if len(where) > 1}
    assert not twice, f"overridden in several classes: {twice}"
    private = {name for name in overrides if name.startswith("_")}
    assert private == {"_save", "_load_from_checkpoint", "_load_best_model", "_push_from_checkpoint"}
    table = (ROOT / "docs" / "training.md").read_text(encoding="utf-8").split("## What the trainer overrides")[1]
    table = table.split("\n\n")[2]  # the paragraph after the section's introduction: the table
    documented = set(re.findall(r"`(\w+)`", "\n".join(row.split("|")[1] for row in table.splitlines()[2:])))
    assert documented == {name for name in overrides if not name.startswith("_")}
