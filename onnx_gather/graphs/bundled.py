"""The files installed with the package, found installed or in a source tree: the sample models
(``onnx_gather.models``, the repository's models/ folder) and the documentation (``onnx_gather.docs``, its docs/)."""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path


def installed_folder(package: str, source: str) -> Traversable:
    """The data package ``package`` (``onnx_gather.docs``) as installed; run from a source tree (``python -m
    onnx_gather`` in the repository, which imports the tree, not the installed package), its folder ``source``
    at the tree's top, even where another copy is installed (an editable install of another work tree maps the
    data package to that tree's folder)."""
    top = Path(__file__).resolve().parents[2]
    if (top / "pyproject.toml").is_file() and (top / source).is_dir():
        return top / source
    try:
        return resources.files(package)
    except ModuleNotFoundError:
        return top / source


def sample_model_path() -> str:
    """Where the bundled sample model (models/sample.onnx in the source tree) is installed."""
    return str(installed_folder("onnx_gather.models", "models") / "sample.onnx")
