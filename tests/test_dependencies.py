"""The package depends on what it imports: every third-party module it imports is a declared dependency, and a plain
``pip install .`` (no extras) runs ``check`` on a model whose ranks need ONNX Runtime's symbolic shape inference, and
writes its HTML page with the scripts installed with the package."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from onnx import TensorProto as T
from onnx import helper as h

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "onnx_gather"
# Modules the package imports that import a distribution of their own which their package does not declare:
# ONNX Runtime's symbolic shape inference imports sympy (onnxruntime 1.32 no longer depends on it).
INDIRECT = {"onnxruntime.tools.symbolic_shape_infer": "sympy"}
OPTIONAL = {"openvino"}  # imported only where the backend is asked for, from the openvino extra


def _distribution(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _declared() -> tuple[set[str], dict[str, set[str]]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = {name: {_distribution(r) for r in reqs} for name, reqs in project["optional-dependencies"].items()}
    return {_distribution(r) for r in project["dependencies"]}, extras


def _imports() -> set[str]:
    """Every module the package imports, by its full name (a deferred import inside a function too)."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
    return names


def test_every_third_party_import_is_a_declared_dependency():
    required, extras = _declared()
    owners = importlib.metadata.packages_distributions()
    needed: dict[str, str] = {}  # distribution -> a module that needs it
    for name in sorted(_imports()):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top in ("onnx_gather", "__future__"):
            continue
        assert top in owners, f"{name}: no installed distribution provides it"
        for distribution in owners[top]:
            needed.setdefault(distribution.lower().replace("_", "-"), name)
        if name in INDIRECT:
            needed.setdefault(INDIRECT[name], name)
    assert set(INDIRECT.values()) <= needed.keys()  # each indirect import is still made
    undeclared = {d: m for d, m in needed.items() if d not in required and not (d in OPTIONAL and d in extras[d])}
    assert undeclared == {}
    assert required - needed.keys() == set()  # nothing declared that nothing imports


@pytest.mark.slow
def test_a_plain_install_checks_a_model_that_needs_symbolic_shape_inference(tmp_path):
    """A fresh venv with ``pip install .`` alone: ``check`` past a ``com.microsoft`` operator, where ONNX's own
    inference cannot tell the gather's rank, asks ONNX Runtime's symbolic shape inference, which imports sympy."""
    graph = h.make_graph(
        [
            h.make_node("BiasGelu", ["x", "b"], ["y"], domain="com.microsoft"),
            h.make_node("Gather", ["y", "i"], ["z"], axis=1, name="pick"),
        ],
        "contrib",
        [h.make_tensor_value_info("x", T.FLOAT, ["n", 4]), h.make_tensor_value_info("b", T.FLOAT, [4])],
        [h.make_tensor_value_info("z", T.FLOAT, None)],
        [h.make_tensor("i", T.INT64, [2], [0, 3])],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    (tmp_path / "contrib.onnx").write_bytes(model.SerializeToString())
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    environment = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    install = subprocess.run(
        [venv / "bin" / "pip", "install", "-q", str(ROOT)], capture_output=True, text=True, env=environment, check=False
    )
    assert install.returncode == 0, install.stderr[-2000:]
    check = subprocess.run(
        [venv / "bin" / "onnx-gather", "check", "contrib.onnx", "--html", "page.html"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=environment,
        check=False,
    )
    assert check.returncode == 0, check.stderr
    assert "internal error" not in check.stderr and "sympy" not in check.stderr
    assert "1 gather" in check.stdout and "'pick'" in check.stdout, check.stdout
    page = (tmp_path / "page.html").read_text()  # the installed package holds the page's scripts (package-data)
    assert "dagre" in page and "class Picture" in page and '"name":"pick"' in page
