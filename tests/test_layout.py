"""The package's layout: layers that import only downwards, and modules of one job each, named uniquely."""

from __future__ import annotations

import ast
import importlib.util
import re
import tomllib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "onnx_gather"
# Lowest first: a module may import its own layer and those before it.
LAYERS = ("core", "graphs", "directml", "runtime", "conformance", "app")
# Every module at any depth under a layer; its layer is the first part of its path below the package.
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] in LAYERS)


def _layer(path: Path) -> str:
    return path.relative_to(PACKAGE).parts[0]


def _id(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def _tool() -> object:
    """tools/test_map.py, whose ``imported`` reads what a file imports of the package (the map is made of it)."""
    spec = importlib.util.spec_from_file_location("tests_map_tool", PACKAGE.parent / "tools" / "test_map.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


TOOL = _tool()


def test_every_module_is_in_a_layer():
    loose = [p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    assert not loose
    # The packages in the source tree: the layers (models/ and docs/ are packaged from the repository's root).
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(LAYERS)
    # Below a layer, every folder of modules is a package (a subpackage such as graphs/lowering), so it is packaged.
    folders = {p.parent for p in MODULES}
    assert not [_id(f) for f in folders if not (f / "__init__.py").exists()]
    # Every .py file under the package is a module of a layer or the package's own two.
    assert set(PACKAGE.rglob("*.py")) == {*MODULES, PACKAGE / "__init__.py", PACKAGE / "__main__.py"}


def test_the_design_names_every_module_in_its_layer():
    """docs/design.md's table of layers names each module of the tree in its layer's row (no module left out)."""
    text = (PACKAGE.parent / "docs" / "design.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| [^|]* \| (.*) \|$", text, re.M))
    assert set(rows) == set(LAYERS)
    unnamed = {
        layer: sorted(p.stem for p in MODULES if _layer(p) == layer and p.stem != "__init__") for layer in LAYERS
    }
    unnamed = {
        layer: [m for m in names if f"`{m}`" not in rows[layer] and f"`{m}/`" not in rows[layer]]
        for layer, names in unnamed.items()
    }
    assert not {layer: names for layer, names in unnamed.items() if names}


def test_the_map_of_tests_is_the_trees():
    """tests/MAP.md (which test files hold which module) is what tools/test_map.py writes of the tree now."""
    written = (PACKAGE.parent / "tests" / "MAP.md").read_text()
    assert written == TOOL.tests_map(), "tests/MAP.md is not the tree's: run python tools/test_map.py"


def test_module_names_are_unique():
    """No two modules share a base name (``__init__.py`` aside), so a name says which module it is."""
    names = [p.name for p in MODULES if p.name != "__init__.py"]
    assert sorted({n for n in names if names.count(n) > 1}) == []


# Public names defined in more than one module because they mean the same thing there: the rule in numpy (core) and
# the same rule built as ONNX nodes (the lowering); the two conformance doors' parallel API; the console script's
# entry point, which calls the command line's. A constant means one thing: its one definition is imported elsewhere.
SAME_MEANING = {
    "fix_indices": {"core/semantics.py", "graphs/lowering/native.py"},
    "axis_words": {"core/reading.py", "graphs/lowering/dml_memory.py"},
    "read_rows": {"core/reading.py", "graphs/lowering/dml_memory.py"},
    "Run": {"conformance/provider_door.py", "conformance/direct_door.py"},
    "run_cases": {"conformance/provider_door.py", "conformance/direct_door.py"},
    "results_table": {"conformance/provider_door.py", "conformance/direct_door.py"},
    "main": {"app/cli.py", "app/entry.py"},
    # the node suite's run and counts, and dmlsim's agreement with real DirectML on it
    "run_suite": {"conformance/node_suite.py", "conformance/dmlsim_suite.py"},
    "figures": {"conformance/node_suite.py", "conformance/dmlsim_suite.py"},
    "suite_summary": {"conformance/node_suite.py", "conformance/dmlsim_suite.py"},
    "recorded": {"conformance/node_suite.py", "conformance/dmlsim_suite.py"},
}


def _assigned(node: ast.stmt) -> list[str]:
    """The names a module-level assignment binds (``A = ...``, ``A: T = ...``, ``A, B = ...``)."""
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    names = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
    return [n.id for n in names if isinstance(n, ast.Name)]


def _public_names(tree: ast.Module) -> list[str]:
    """A module's public functions and classes, and its public constants (upper-case names bound at module level)."""
    names = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.append(node.name)
        else:
            names.extend(name for name in _assigned(node) if name.isupper())
    return [name for name in names if not name.startswith("_")]


def test_public_names_are_unique_in_meaning():
    """A public function, class or constant name is defined in one module, but where it means the same thing
    (SAME_MEANING): a constant of one name and two meanings (two DATA_TYPES) would leave a reader to guess."""
    defined: dict[str, set[str]] = {}
    for path in MODULES:
        for name in _public_names(ast.parse(path.read_text())):
            defined.setdefault(name, set()).add(path.relative_to(PACKAGE).as_posix())
    shared = {name: places for name, places in defined.items() if len(places) > 1}
    assert shared == SAME_MEANING


def test_every_package_is_packaged():
    """pyproject.toml lists every package of the source tree, subpackages too, so ``pip install .`` installs them."""
    listed = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    found = {".".join(p.parent.relative_to(PACKAGE.parent).parts) for p in PACKAGE.rglob("__init__.py")}
    assert sorted(found - set(listed)) == []


def test_subpackages_are_checked():
    """The walk reaches subpackages: graphs/lowering and graphs/placement are modules of the graphs layer."""
    assert {_id(p) for p in MODULES} >= {"graphs/lowering/lower.py", "graphs/placement/nodes.py"}


def test_imports_run_downwards_only():
    """Every module imports its own layer and those below it, never one above (deferred imports too)."""
    upward = {}
    for path in MODULES:
        layer = LAYERS.index(_layer(path))
        found = sorted(
            n for n in TOOL.imported(path) if n.split(".")[1] in LAYERS and LAYERS.index(n.split(".")[1]) > layer
        )
        if found:
            upward[_id(path)] = found
    assert not upward, f"modules that import a higher layer: {upward}"


def test_modules_stay_within_a_sanity_cap():
    """Modules are split by responsibility (one job each, its names unique), not by a line count: a tight cap split
    one job in two or pushed code into hand-packed lines. 800 lines only catches a module that has surely taken on
    a second job."""
    long = {_id(p): n for p in MODULES if (n := len(p.read_text().splitlines())) > 800}
    assert not long, f"modules over 800 lines: {long}"
