"""The documentation installed with the package (``onnx_gather.docs``, the repository's docs/ folder), for
``onnx-gather docs``: an installed onnx-gather carries what its messages cite."""

from __future__ import annotations

from importlib.resources.abc import Traversable
from typing import TextIO

from onnx_gather.core.errors import UserError
from onnx_gather.graphs.bundled import installed_folder


class UnknownDocument(UserError):
    """A name that is not one of the documents."""


def _files() -> dict[str, Traversable]:
    folder = installed_folder("onnx_gather.docs", "docs")
    return {entry.name.removesuffix(".md"): entry for entry in folder.iterdir() if entry.name.endswith(".md")}


def show(name: str | None, out: TextIO) -> int:
    """Print the document ``name``; without a name, list the documents with where they are installed."""
    files = _files()
    if name is None:
        width = max(map(len, files)) + 1
        for each in sorted(files):
            out.write(f"{each:<{width}} {files[each]}\n")
        out.write("Print one with: onnx-gather docs NAME (e.g. onnx-gather docs semantics | less)\n")
        return 0
    if name not in files:
        raise UnknownDocument(f"no document {name!r} (there are: {', '.join(sorted(files))})")
    out.write(files[name].read_text(encoding="utf-8"))
    return 0
