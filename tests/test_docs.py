"""Every Python example of the README and docs/ runs as printed, and gives the results its ``# ->`` comments say."""

from __future__ import annotations

import ast
import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def _blocks() -> list:
    return [
        pytest.param(code, id=f"{path.name}:{number}")
        for path in DOCUMENTS
        for number, code in enumerate(BLOCK.findall(path.read_text()), 1)
    ]


@pytest.mark.parametrize("code", _blocks())
def test_example_runs_from_a_source_tree_too(code, tmp_path):
    # Run from the repository, Python imports the source tree before the installed package: the data packaged from
    # the repository's top (the sample model, the documents) must be found there too.
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=environment, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_documents_hold_python_examples():
    assert _blocks(), "no Python example found: the test below would check nothing"


@pytest.mark.parametrize("code", _blocks())
def test_example_runs_as_printed(code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lines = code.splitlines()
    namespace: dict = {}
    checked = 0
    for statement in ast.parse(code).body:
        source = ast.get_source_segment(code, statement)
        claim = re.search(r"#\s*->\s*(.+)$", lines[statement.end_lineno - 1])
        if isinstance(statement, ast.Expr) and claim:
            assert eval(compile(ast.Expression(statement.value), "<example>", "eval"), namespace) == ast.literal_eval(
                claim.group(1).strip()
            ), source
            checked += 1
        else:
            exec(compile(ast.Module([statement], []), "<example>", "exec"), namespace)
    assert checked or "# ->" not in code


# Command examples. A ```console block is run as printed: each `$ onnx-gather ...` line (a trailing `# exit N` says the
# exit code it ends with, else 0) in a temporary folder holding the bundled models as models/, and each line after it
# must appear in what it printed, in that order (`...` stands for lines left out). A command that names the dml
# backend needs real DirectML (require_directml). ```sh blocks are set-up commands and templates, not run.
CONSOLE = re.compile(r"```console\n(.*?)```", re.DOTALL)
EXIT = re.compile(r"\s+#\s*exit\s+(\d+)$")


def _commands(block: str) -> list[tuple[str, int, list[str]]]:
    """``(command, exit code, expected lines)`` of each ``$`` line of a console block."""
    commands: list[tuple[str, int, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            code = EXIT.search(line)
            command = EXIT.sub("", line[2:]).strip()
            commands.append((command, int(code.group(1)) if code else 0, []))
        else:
            assert commands, f"a console block must start with a `$` command: {line!r}"
            commands[-1][2].append(line.rstrip())
    return commands


def _needs_directml(command: str) -> bool:
    return "dml" in re.split(r"[\s,=]", command)


def _console_blocks() -> list:
    return [
        pytest.param(
            block,
            id=f"{path.name}:console{number}",
            marks=[pytest.mark.directml] * any(_needs_directml(c) for c, _, _ in _commands(block)),
        )
        for path in DOCUMENTS
        for number, block in enumerate(CONSOLE.findall(path.read_text()), 1)
    ]


def test_the_readme_holds_console_examples_and_each_command_is_onnx_gather():
    blocks = [block for block in CONSOLE.findall((ROOT / "README.md").read_text())]
    assert len(blocks) >= 2, "the README's worked examples are console blocks: the test below would check little"
    for block in blocks:
        assert all(command.startswith("onnx-gather ") for command, _, _ in _commands(block))


def _in_order(expected: list[str], printed: list[str]) -> bool:
    remaining = iter(printed)
    return all(line == "..." or any(line == each for each in remaining) for line in expected)


@pytest.mark.parametrize("block", _console_blocks())
def test_console_example_runs_as_printed(block, tmp_path, monkeypatch, capsys):
    import shlex
    import shutil

    from conftest import require_directml

    from onnx_gather.app.cli import main

    shutil.copytree(ROOT / "models", tmp_path / "models", ignore=shutil.ignore_patterns("__*"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "120")
    for command, code, expected in _commands(block):
        words = shlex.split(command)
        if _needs_directml(command):
            require_directml()
        capsys.readouterr()
        assert main(words[1:]) == code, command
        printed = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
        assert _in_order(expected, printed), f"{command} printed:\n" + "\n".join(printed)


def _help_texts() -> dict[str, str]:
    from onnx_gather.app.cli import COMMANDS, main

    texts = {}
    for command in COMMANDS:
        output = io.StringIO()
        with contextlib.redirect_stdout(output), pytest.raises(SystemExit) as ended:
            main([command.name, "--help"])
        assert ended.value.code == 0
        texts[command.name] = " ".join(output.getvalue().split())
    return texts


def test_every_shape_and_range_example_of_the_help_texts_is_accepted_by_the_sample(capsys):
    from onnx_gather.app.cli import main

    sample = str(ROOT / "models" / "sample.onnx")
    examples = {
        (name, example) for name, text in _help_texts().items() for example in re.findall(r"e\.g\. (-?\w+:-?\w+)", text)
    }
    shapes = {example for _, example in examples if re.fullmatch(r"[a-z_]+:\d+(x\d+)*", example)}
    ranges = {example for _, example in examples if re.fullmatch(r"-?\d+:-?\d+", example)}
    assert shapes == {"token_ids:4x6"} and ranges, examples
    for shape in shapes:
        assert main(["check", sample, "--shape", shape]) == 0
        assert main(["run", sample, "--backend", "pyop", "--shape", shape]) == 0
    for span in ranges:
        assert main(["check", sample, "--int-range", span, "--shape", "token_ids:4x6"]) == 0


def test_the_lowered_node_counts_docs_ops_states_are_the_sample_models():
    import onnx

    import onnx_gather

    pattern = r"6 nodes \(3 gathers\) lower to (\d+) with\s+`directml`, (\d+) with `clamp`.*?, (\d+) with `zero`"
    stated = re.search(pattern + r" and (\d+) with `error`", (ROOT / "docs" / "ops.md").read_text(), re.DOTALL)
    assert stated, "docs/ops.md no longer states the sample model's lowered sizes: update this test"
    sample = onnx.load(ROOT / "models" / "sample.onnx")
    assert len(sample.graph.node) == 6
    counts = [
        len(onnx_gather.to_onnx(onnx_gather.to_dml(sample, out_of_bounds=mode)).graph.node)
        for mode in ("directml", "clamp", "zero", "error")
    ]
    assert counts == [int(number) for number in stated.groups()]


def test_onnx_gather_docs_lists_every_document_of_docs(capsys):
    from onnx_gather.app.cli import main

    assert main(["docs"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()[:-1]]
    assert listed == sorted(path.stem for path in (ROOT / "docs").glob("*.md"))
    assert {"cli", "directml-on-linux", "ops"} <= set(listed)
    for name in listed:
        assert main(["docs", name]) == 0 and capsys.readouterr().out == (ROOT / "docs" / f"{name}.md").read_text()


def test_imported_from_a_source_tree_the_documents_and_models_are_the_trees(tmp_path):
    """``onnx-gather docs`` and the sample model of a source tree are its own docs/ and models/, even where another
    copy of the package is installed (an editable install of another work tree)."""
    code = "from onnx_gather.graphs.bundled import installed_folder as f; print(f('onnx_gather.docs', 'docs'))"
    code += "; print(f('onnx_gather.models', 'models'))"
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=environment, capture_output=True, text=True)
    assert done.stdout.split() == [str(ROOT / "docs"), str(ROOT / "models")], done.stderr


def test_the_licence_pyproject_declares_is_the_one_in_license():
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]
    text = (ROOT / "LICENSE").read_text()
    assert declared == {"text": "MIT"} and text.startswith("MIT License\n")
    assert (
        "Permission is hereby granted, free of charge" in text
        and "Licence: MIT ([LICENSE](LICENSE))" in (ROOT / "README.md").read_text()
    )


def test_the_json_keys_docs_cli_lists_are_a_parity_reports(tmp_path, capsys):
    import json

    from onnx_gather.app.cli import main

    listed = re.search(r"report of one model has the keys `([^`]*)`", (ROOT / "docs" / "cli.md").read_text())
    report = tmp_path / "r.json"
    arguments = [str(ROOT / "models" / "sample.onnx"), "--backends", "pyop,cpu", "--shape", "token_ids:4x6"]
    assert main(["parity", *arguments, "--int-range", "0:32", "--report", str(report)]) == 0
    assert listed and re.split(r",\s+", listed.group(1)) == list(json.loads(report.read_text()))


def test_ci_runs_exactly_the_readmes_test_command():
    readme = (ROOT / "README.md").read_text()
    commands = [line for block in re.findall(r"```sh\n(.*?)```", readme, re.DOTALL) for line in block.splitlines()]
    tests = [line for line in commands if line.startswith("python3 -m venv") and line.endswith("pytest -q -n 2")]
    assert len(tests) == 1, tests
    assert (ROOT / ".ci" / "run").read_text().splitlines()[-1] == tests[0]
    assert "export CI=true" in (ROOT / ".ci" / "run").read_text()


def test_the_versions_the_readme_names_are_the_set_ups():
    from onnx_gather.directml.layout import ORT_DIRECTML_VERSION

    readme = (ROOT / "README.md").read_text()
    named = set(re.findall(r"onnxruntime-directml==([0-9.]+)", readme))
    assert named == {ORT_DIRECTML_VERSION} and f"ONNX Runtime {ORT_DIRECTML_VERSION} refuses" in readme


def test_the_readme_is_under_200_lines_and_its_first_screen_says_what_for_whom_and_how_to_try():
    readme = (ROOT / "README.md").read_text()
    first_screen = "\n".join(readme.splitlines()[:25])
    assert len(readme.splitlines()) < 200
    assert "Windows GPUs" in first_screen and "DirectML" in first_screen
    assert "pip install . && onnx-gather demo" in first_screen


# The design page (docs/design.md) is held to the tree: its module table by tests/test_layout.py, its names here.
DESIGN = ROOT / "docs" / "design.md"
DESIGN_LINES = 150  # one page, read in five minutes
LAYER_NAMES = ("core", "graphs", "directml", "runtime", "conformance", "app")
# A name of the package as the design page writes it: `layer.module.name`, in backquotes.
DOTTED = re.compile(rf"`((?:{'|'.join(LAYER_NAMES)})\.[A-Za-z_][\w.]*)`")


def _resolves(dotted: str) -> bool:
    """Whether ``onnx_gather.<dotted>`` is a module, or a name defined in one (``Class.method`` too)."""
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(["onnx_gather", *parts[:cut]]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(found, name):
                return False
            found = getattr(found, name)
        return True
    return False


def _rule_rows() -> list[list[str]]:
    """The rows of the design page's "One home per rule" table: rule, home, called by."""
    section = DESIGN.read_text().split("\n## One home per rule\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| rule |")]
    return [[cell.strip() for cell in row.strip().strip("|").split(" | ")] for row in rows]


def test_the_design_is_one_page():
    assert len(DESIGN.read_text().splitlines()) <= DESIGN_LINES


def test_every_rule_of_the_design_has_a_home_in_the_tree():
    """Each row of "One home per rule" names its home as `layer.module.name`, and that name exists in the tree."""
    rows = _rule_rows()
    assert len(rows) >= 10, "the design page's table of rules is gone or has another form: update this test"
    assert all(len(row) == 3 and all(row) for row in rows), [row for row in rows if len(row) != 3 or not all(row)]
    homeless = [row[0] for row in rows if not DOTTED.search(row[1])]
    assert not homeless, f"rules whose home names no module of the tree: {homeless}"


def test_every_name_the_design_gives_is_in_the_tree():
    """Every `layer.module.name` the design page names (the homes, the callers, the walks) is a module or a name
    defined in one, so the page cannot go on naming code that was moved or renamed."""
    names = sorted(set(DOTTED.findall(DESIGN.read_text())))
    assert len(names) >= 30, names
    assert [name for name in names if not _resolves(name)] == []


# What the documents and the code cite of the documents: a link's file, a section by its quoted heading (`ops.md,
# "Known deviations"`) or by its number (`semantics.md section 6`, `semantics.md 4.3`).
CITED_FILES = [
    *DOCUMENTS,
    *sorted((ROOT / "onnx_gather").rglob("*.py")),
    *sorted((ROOT / "tests").glob("*.py")),
    *sorted((ROOT / "tools").glob("*.py")),
]
QUOTED = re.compile(r"([\w-]+)\.md\)?(?:,\s*|\s*\()\"([^\"\s][^\"]*)\"")
NUMBERED = re.compile(r"([\w-]+)\.md\)?,?\s+(?:sections?\s+)?(\d+(?:\.\d+)?[a-z]?)\b")


def _headings(name: str) -> list[str]:
    lines = (ROOT / "docs" / f"{name}.md").read_text().splitlines()
    return [line.lstrip("#").strip() for line in lines if line.startswith("##")]


def _flat(path: Path) -> str:
    """The file's text with line breaks (and a comment's ``#`` after one) made spaces: a citation may span lines."""
    return re.sub(r"\s*\n\s*(?:#\s*)?", " ", path.read_text())


def test_every_section_cited_of_the_docs_is_there():
    missing = []
    for path in CITED_FILES:
        text = _flat(path)
        for name, heading in QUOTED.findall(text):
            if (ROOT / "docs" / f"{name}.md").exists() and not any(h.startswith(heading) for h in _headings(name)):
                missing.append(f"{path.relative_to(ROOT)}: {name}.md, {heading!r}")
        for name, number in NUMBERED.findall(text):
            if name == "semantics" and not any(re.match(rf"{re.escape(number)}\.? ", h) for h in _headings(name)):
                missing.append(f"{path.relative_to(ROOT)}: {name}.md section {number}")
    assert not missing


def test_every_link_of_the_documents_is_a_file_of_the_repository():
    """A relative link in the README or docs/ names a file that exists inside the repository (none leads out of it)."""
    broken = []
    for path in DOCUMENTS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            where = (path.parent / target).resolve()
            if not where.is_relative_to(ROOT) or not where.exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert not broken
