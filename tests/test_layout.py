"""The package's layout: layers that import only downwards, and modules of one job each, of at most 400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "onnx_gather"
# Lowest first: a module may import its own layer and those before it.
LAYERS = ("core", "graphs", "directml", "runtime", "conformance", "app")
MODULES = sorted(p for p in PACKAGE.glob("*/*.py") if p.parent.name in LAYERS)


def _imported(path: Path) -> set[str]:
    """The onnx_gather modules ``path`` imports anywhere in it (a function's deferred import too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in names if name.startswith("onnx_gather.")}


def test_every_module_is_in_a_layer():
    loose = [p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    assert not loose
    # The packages in the source tree: the layers (models/ and docs/ are packaged from the repository's root).
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(LAYERS)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_imports_run_downwards_only(path):
    layer = LAYERS.index(path.parent.name)
    upward = sorted(name for name in _imported(path)
                    if name.split(".")[1] in LAYERS and LAYERS.index(name.split(".")[1]) > layer)  # fmt: skip
    assert not upward, f"{path.parent.name}/{path.name} imports a higher layer: {upward}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_modules_stay_small(path):
    assert len(path.read_text().splitlines()) <= 400
