"""Every Python example of the README and docs/ runs as printed, and gives the results its ``# ->`` comments say."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def _blocks() -> list:
    return [pytest.param(code, id=f"{path.name}:{number}")
            for path in DOCUMENTS for number, code in enumerate(BLOCK.findall(path.read_text()), 1)]  # fmt: skip


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
