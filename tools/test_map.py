"""Write tests/MAP.md: for each module of the package, the test files that import it (directly, deferred imports
too), so that a maintainer who changes a module knows which tests hold it. tests/test_layout.py fails while the map
is not the tree's. Run by hand after adding a module or a test file: python tools/test_map.py
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE, TESTS = ROOT / "onnx_gather", ROOT / "tests"


def imported(path: Path) -> set[str]:
    """The onnx_gather modules ``path`` imports anywhere in it (a function's deferred import too), by dotted name
    (``from a import b``: a.b and a). tests/test_layout.py reads imports with it too."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in names if name.startswith("onnx_gather.")}


def _reached(direct: set[str], imports: dict[str, set[str]]) -> set[str]:
    """The package's modules ``direct`` imports lead to, at any depth."""
    seen, stack = set(), [m for m in direct if m in imports]
    while stack:
        module = stack.pop()
        if module not in seen:
            seen.add(module)
            stack.extend(m for m in imports[module] if m in imports)
    return seen


def tests_map() -> str:
    """The map's text, as tests/MAP.md holds it."""
    modules = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts)
        for p in PACKAGE.rglob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
    )
    tests = {p.name: imported(p) for p in sorted(TESTS.glob("*.py")) if p.name.startswith("test_")}
    imports = {m: imported(ROOT / Path(*m.split(".")).with_suffix(".py")) for m in modules}
    reach = {name: _reached(direct, imports) for name, direct in tests.items()}
    lines = [
        "# Which tests hold which module",
        "",
        "Each module of the package, the test files that import it, and how many more reach it through the modules",
        "they import (written by `python tools/test_map.py`; `tests/test_layout.py` fails while it is not the",
        "tree's). Tests that run the command line in a process of its own reach `app` without importing it.",
        "",
    ]
    for module in modules:
        users = [name for name, imported in tests.items() if module in imported]
        through = sum(1 for name in tests if module in reach[name] and name not in users)
        said = ", ".join(users) if users else "none directly"
        lines.append(f"* `{module}`: {said}; {through} more through other modules")
    return "\n".join(lines) + "\n"


def main() -> None:
    (TESTS / "MAP.md").write_text(tests_map())


if __name__ == "__main__":
    main()
