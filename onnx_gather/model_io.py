"""Reading and writing model files: external data left on disk, outputs written atomically, inputs untouched."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import onnx

from onnx_gather.graph import bodies
from onnx_gather.validate import InvalidModel, validate


class ModelError(ValueError):
    """A model file that cannot be read or written, with a one-line message naming the file and the problem."""


def _external_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    for body in bodies(model):
        if isinstance(body.container, onnx.GraphProto):
            yield from (t for t in body.container.initializer if t.data_location == onnx.TensorProto.EXTERNAL)
        for node in body.nodes:
            for attribute in node.attribute:
                if (
                    attribute.type == onnx.AttributeProto.TENSOR
                    and attribute.t.data_location == onnx.TensorProto.EXTERNAL
                ):
                    yield attribute.t


def _external_info(tensor: onnx.TensorProto) -> dict[str, str]:
    return {entry.key: entry.value for entry in tensor.external_data}


def _check_external_data(model: onnx.ModelProto, folder: Path, path: Path) -> set[str]:
    """The external data files the model uses, checked: inside its folder, present, long enough."""
    locations = set()
    for tensor in _external_tensors(model):
        info = _external_info(tensor)
        location = info.get("location", "")
        target = (folder / location).resolve()
        if not location or Path(location).is_absolute() or not target.is_relative_to(folder.resolve()):
            raise ModelError(
                f"{path}: tensor {tensor.name!r} has external data at {location!r}, outside the model's folder"
            )
        if not target.is_file():
            raise ModelError(f"{path}: tensor {tensor.name!r} needs external data file {location!r}, which is missing")
        end = int(info.get("offset", 0) or 0) + int(info.get("length", 0) or 0)
        if end > target.stat().st_size:
            raise ModelError(
                f"{path}: tensor {tensor.name!r} reads bytes up to {end} of {location!r}, "
                f"which has only {target.stat().st_size}"
            )
        locations.add(location)
    return locations


def load(path: str | os.PathLike) -> onnx.ModelProto:
    """Read a model, leaving its external data on disk (checked, never loaded)."""
    path = Path(path)
    if not path.exists():
        raise ModelError(f"{path}: no such file")
    if path.is_dir():
        raise ModelError(f"{path}: is a directory, not an ONNX model file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except PermissionError:
        raise ModelError(f"{path}: permission denied") from None
    except Exception as error:
        if "MaxDepth" in str(error):
            raise ModelError(
                f"{path}: nested deeper than protobuf reads (100 levels of messages, about 33 levels of subgraphs)"
            ) from None
        raise ModelError(f"{path}: not a readable ONNX model ({type(error).__name__})") from None
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise ModelError(f"{path}: not an ONNX model (no graph)")
    _check_external_data(model, path.parent, path)
    try:
        validate(model)
    except InvalidModel as error:
        raise ModelError(f"{path}: {error}") from None
    return model


def save(model: onnx.ModelProto, path: str | os.PathLike, source: str | os.PathLike) -> None:
    """Write ``model`` to ``path`` atomically, its external data files copied from next to ``source`` where needed.

    ONNX Runtime looks for external data relative to the model file, so when ``path`` is in another folder
    the files go there too (each written atomically); a model in the same folder shares them.
    """
    path, source = Path(path), Path(source)
    folder, source_folder = path.parent, source.parent
    folder.mkdir(parents=True, exist_ok=True)
    if folder.resolve() != source_folder.resolve():
        for location in sorted(_check_external_data(model, source_folder, source)):
            target = folder / location
            target.parent.mkdir(parents=True, exist_ok=True)
            _write_atomically(target, lambda file, location=location: _copy(source_folder / location, file))
    write_bytes(path, model.SerializeToString())


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a reader sees the old file or the whole new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomically(path, lambda file: file.write(data))


def _copy(source: Path, file: BinaryIO) -> None:
    with open(source, "rb") as data:
        shutil.copyfileobj(data, file, length=16 * 1024 * 1024)


def _write_atomically(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write through a temporary file in the same folder, renamed over ``path`` only once complete."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
