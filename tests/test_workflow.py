"""The Windows workflow (.github/workflows/directml.yml) cannot run here: what can be checked on Linux is. Its runner,
its pinned versions, its test selection (exactly the tests marked ``directml``, some: read from the test files), and its
commands (files and entry points that exist; the parity step runs here without its dml backend)."""

from __future__ import annotations

import ast
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from onnx_gather.app.cli import COMMANDS, main
from onnx_gather.directml.layout import ORT_DIRECTML_VERSION

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = (ROOT / ".github" / "workflows" / "directml.yml").read_text()


def _commands() -> list[str]:
    """Every command line of the workflow's ``run:`` steps (one-line and ``|`` blocks), read plainly."""
    commands, block = [], None
    for line in WORKFLOW.splitlines():
        indent = len(line) - len(line.lstrip())
        if block is not None and line.strip() and indent > block:
            commands.append(line.strip())
            continue
        block = None
        found = re.match(r"\s*(?:- )?run:\s*(.*)$", line)
        if found and found.group(1) == "|":
            block = indent
        elif found:
            commands.append(found.group(1).strip())
    return commands


def _one(prefix: str) -> list[str]:
    found = [shlex.split(command) for command in _commands() if command.startswith(prefix)]
    assert len(found) == 1, (prefix, _commands())
    return found[0]


def test_the_workflow_runs_on_a_windows_gpu_runner_and_says_why_not_warp():
    runs_on = re.search(r"^\s*runs-on:\s*\[(.*)\]\s*$", WORKFLOW, re.MULTILINE)
    assert runs_on and {label.strip() for label in runs_on.group(1).split(",")} == {"self-hosted", "windows", "gpu"}
    assert "WARP" in WORKFLOW and "IsSoftwareAdapter" in WORKFLOW and "IsHardwareAdapter" in WORKFLOW
    assert "onnx_gather.demo" not in WORKFLOW  # a module that is gone


def test_the_workflow_pins_the_versions_the_semantics_were_measured_with():
    pins = dict(re.findall(r"([a-z][a-z0-9-]*)==([0-9][0-9.]*)", " ".join(_commands())))
    assert pins["onnxruntime-directml"] == ORT_DIRECTML_VERSION
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    extensions = next(spec for spec in declared if spec.startswith("onnxruntime-extensions"))
    assert extensions.startswith("onnxruntime-extensions>=0.15,<0.16") and pins["onnxruntime-extensions"].startswith(
        "0.15."
    )  # within the range pyproject declares (its private names are hooked)
    assert re.search(r'python-version:\s*"3\.11"', WORKFLOW)
    install = _one("python -m pip install '.[")
    extras = re.match(r"\.\[(.*)\]", install[4]).group(1).split(",")
    assert set(extras) <= set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def _is_directml_mark(node: ast.AST) -> bool:
    """``pytest.mark.directml`` itself."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "directml"
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "mark"
    )


def _has_directml_mark(node: ast.AST) -> bool:
    return any(_is_directml_mark(each) for each in ast.walk(node))


def _calls_require_directml(node: ast.AST) -> bool:
    return any(
        isinstance(each, ast.Call) and getattr(each.func, "id", None) == "require_directml" for each in ast.walk(node)
    )


def _is_fixture(function: ast.FunctionDef) -> bool:
    return any("fixture" in ast.unparse(decorator) for decorator in function.decorator_list)


class _Marks:
    """What the test files say, read without importing or collecting them: each test function's ``directml`` mark
    (on the function, on its module, or on some of its parameters, directly or through a module-level name), and
    whether it needs real DirectML (calls ``require_directml``, or takes a fixture that does)."""

    def __init__(self) -> None:
        self.marked: set[str] = set()  # "file::test": every case of the test is marked
        self.partly: set[str] = set()  # some of its parameters are
        self.needing: set[str] = set()
        conftest = ast.parse((ROOT / "tests" / "conftest.py").read_text())
        shared = {
            f.name
            for f in ast.walk(conftest)
            if isinstance(f, ast.FunctionDef) and _is_fixture(f) and _calls_require_directml(f)
        }
        for path in sorted((ROOT / "tests").glob("test_*.py")):
            tree = ast.parse(path.read_text())
            names = {}  # module-level name -> its definition (parameter lists, or functions that make them)
            for node in tree.body:
                if isinstance(node, ast.Assign):
                    names.update((target.id, node) for target in node.targets if isinstance(target, ast.Name))
                elif isinstance(node, ast.FunctionDef):
                    names[node.name] = node
            module_marked = "pytestmark" in names and _has_directml_mark(names["pytestmark"])
            fixtures = shared | {
                f.name
                for f in ast.walk(tree)
                if isinstance(f, ast.FunctionDef) and _is_fixture(f) and _calls_require_directml(f)
            }
            for test in ast.walk(tree):
                if not isinstance(test, ast.FunctionDef) or not test.name.startswith("test_"):
                    continue
                key = f"{path.name}::{test.name}"
                if module_marked or any(_is_directml_mark(decorator) for decorator in test.decorator_list):
                    self.marked.add(key)
                for decorator in (each for each in test.decorator_list if not _is_directml_mark(each)):
                    used = {each.id for each in ast.walk(decorator) if isinstance(each, ast.Name)} & set(names)
                    if _has_directml_mark(decorator) or any(_has_directml_mark(names[name]) for name in used):
                        self.partly.add(key)
                arguments = {argument.arg for argument in test.args.args}
                if _calls_require_directml(test) or arguments & fixtures:
                    self.needing.add(key)


def test_the_workflows_test_selection_is_exactly_the_tests_marked_directml_and_some():
    command = _one("python -m pytest")
    assert command[:3] == ["python", "-m", "pytest"]
    # Only the marker selects: no -k, --deselect, --ignore or other paths, so the selection is `pytest -m directml
    # tests` as such (what pyproject adds applies to both alike, and selects nothing).
    assert [word for word in command[3:] if word not in ("-q", "-rs")] == ["-m", "directml", "tests"], command
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert settings["testpaths"] == ["tests"]
    assert not re.search(r"(^|\s)(-m|-k|--deselect|--ignore)", settings["addopts"])
    assert any(marker.startswith("directml:") for marker in settings["markers"])
    marks = _Marks()
    # Every test that needs real DirectML is among them (require_directml fails an unmarked one where it runs).
    assert not marks.needing - marks.marked - marks.partly, sorted(marks.needing - marks.marked - marks.partly)
    # Some: the conformance, the whole models, the runner, the docs' dml example...
    assert len(marks.marked) > 50 and len(marks.partly) >= 4, (len(marks.marked), len(marks.partly))
    pow_of_zero = "test_directmls_pow_of_zero_to_the_zero_deep_in_a_chain_is_found_on_real_directml"
    assert f"test_reduce.py::{pow_of_zero}" in marks.marked
    assert "test_parity.py::test_bad_input_exits_2" not in marks.marked | marks.partly


def test_the_workflows_parity_step_runs_here_without_its_dml_backend(tmp_path, monkeypatch, capsys):
    command = _one("onnx-gather ")
    assert command[1] in {each.name for each in COMMANDS}
    assert (ROOT / command[2]).is_file()  # models/sample.onnx, in the checkout
    backends = command[command.index("--backends") + 1]
    assert "dml" in backends.split(",")
    here = [word if word != backends else backends.replace(",dml", "") for word in command[1:]]
    here = [str(ROOT / word) if word == command[2] else word for word in here]
    monkeypatch.chdir(tmp_path)
    assert main(here) == 0, capsys.readouterr()
    assert (tmp_path / "parity.json").is_file() and (tmp_path / "parity.md").is_file()


def test_a_test_that_needs_real_directml_without_the_marker_fails_saying_so(tmp_path):
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path)
    (tmp_path / "test_needs.py").write_text(
        "import pytest\nfrom conftest import require_directml\n\n\ndef test_unmarked():\n    require_directml()\n\n\n"
        "@pytest.mark.directml\ndef test_marked():\n    require_directml()\n"
    )
    environment = {**os.environ, "CI": "", "ONNX_GATHER_DIRECTML_HOME": str(tmp_path / "none")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-W", "ignore", str(tmp_path)],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
    )
    assert "test_unmarked needs real DirectML: mark it @pytest.mark.directml" in done.stdout, done.stdout
    assert "1 failed, 1 skipped" in done.stdout and "real DirectML is not set up" in done.stdout
