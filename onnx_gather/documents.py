"""The documentation installed with the package (``onnx_gather.docs``, the repository's docs/ folder), for
``onnx-gather docs``: an installed onnx-gather carries what its messages cite."""

from __future__ import annotations

from importlib import resources
from typing import TextIO


def _files() -> dict[str, resources.abc.Traversable]:
    folder = resources.files("onnx_gather.docs")
    return {entry.name.removesuffix(".md"): entry for entry in folder.iterdir() if entry.name.endswith(".md")}


def names() -> list[str]:
    """The documents, by name: ``semantics`` for docs/semantics.md."""
    return sorted(_files())


def show(name: str | None, out: TextIO) -> int:
    """Print the document ``name``; without a name, list the documents with where they are installed."""
    files = _files()
    if name is None:
        for each in sorted(files):
            out.write(f"{each:<12} {files[each]}\n")
        out.write("Print one with: onnx-gather docs NAME (e.g. onnx-gather docs semantics | less)\n")
        return 0
    out.write(files[name].read_text(encoding="utf-8"))
    return 0
