"""Reading and writing model files: external data left on disk, outputs written atomically, inputs untouched."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

import onnx
from google.protobuf.message import DecodeError
from onnx.external_data_helper import ExternalDataInfo, uses_external_data

from onnx_gather.core.errors import UserError
from onnx_gather.graphs.plumbing import bodies, sort_topologically
from onnx_gather.graphs.validate import InvalidModel, validate


class ModelError(UserError):
    """A model file that cannot be read or written, with a one-line message naming the file and the problem."""


class OutputError(UserError):
    """An output path that must not or cannot be written, with a one-line message naming the flag and the path."""


def _external_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    for body in bodies(model):
        if isinstance(body.container, onnx.GraphProto):
            yield from (t for t in body.container.initializer if uses_external_data(t))
        for node in body.nodes:
            yield from (a.t for a in node.attribute if a.type == onnx.AttributeProto.TENSOR and uses_external_data(a.t))


def _check_external_data(model: onnx.ModelProto, folder: Path, path: Path) -> set[str]:
    """The external data files the model uses, checked: inside its folder, present, long enough."""
    locations = set()
    for tensor in _external_tensors(model):
        try:
            info = ExternalDataInfo(tensor)
        except ValueError as error:  # an offset or length that is not a number
            raise ModelError(f"{path}: tensor {tensor.name!r} has malformed external data: {error}") from None
        location = info.location
        target = (folder / location).resolve()
        if not location or Path(location).is_absolute() or not target.is_relative_to(folder.resolve()):
            raise ModelError(
                f"{path}: tensor {tensor.name!r} has external data at {location!r}, outside the model's folder"
            )
        if not target.is_file():
            raise ModelError(f"{path}: tensor {tensor.name!r} needs external data file {location!r}, which is missing")
        end = (info.offset or 0) + (info.length or 0)
        if end > target.stat().st_size:
            raise ModelError(
                f"{path}: tensor {tensor.name!r} reads bytes up to {end} of {location!r}, "
                f"which has only {target.stat().st_size}"
            )
        locations.add(location)
    return locations


def load(path: str | os.PathLike) -> onnx.ModelProto:
    """Read a model, leaving its external data on disk (checked, never loaded), its nodes in topological order."""
    path = Path(path)
    if not path.exists():
        raise ModelError(f"{path}: no such file")
    if path.is_dir():
        raise ModelError(f"{path}: is a directory, not an ONNX model file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except PermissionError:
        raise ModelError(f"{path}: permission denied") from None
    except DecodeError as error:  # protobuf cannot parse the bytes; anything else is not the file's fault
        if "MaxDepth" in str(error):  # upb names its limit of 100 nested messages only in the message
            raise ModelError(
                f"{path}: nested deeper than protobuf reads (100 levels of messages, about 33 levels of subgraphs)"
            ) from None
        raise ModelError(f"{path}: not a readable ONNX model ({type(error).__name__})") from None
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise ModelError(f"{path}: not an ONNX model (no graph)")
    _check_external_data(model, path.parent, path)
    sort_topologically(model)  # ONNX Runtime runs nodes listed in any order; so does every command
    try:
        validate(model)
    except InvalidModel as error:
        raise ModelError(f"{path}: {error}") from None
    return model


def data_files(model: onnx.ModelProto, path: str | os.PathLike) -> list[Path]:
    """The external data files that the model read from ``path`` uses."""
    folder = Path(path).parent
    return [folder / location for location in sorted(_check_external_data(model, folder, Path(path)))]


def _data_names(locations: Sequence[str], path: Path) -> dict[str, str]:
    """Copied data files are named after the model they serve, so that no other model's file is overwritten."""
    if len(locations) == 1:
        return {locations[0]: f"{path.name}.data"}
    return {location: f"{path.name}.{number}.data" for number, location in enumerate(locations, start=1)}


def _copied_data(model: onnx.ModelProto, path: Path, source: Path) -> dict[str, str]:
    """The external data files ``save`` copies next to ``path``, by location: none where it is beside ``source``."""
    if path.parent.resolve() == source.parent.resolve():
        return {}
    return _data_names(sorted(_check_external_data(model, source.parent, source)), path)


def saved_files(model: onnx.ModelProto, path: str | os.PathLike, source: str | os.PathLike) -> list[Path]:
    """Every file ``save(model, path, source)`` writes: the copied external data files, then the model."""
    path = Path(path)
    return [path.parent / name for name in _copied_data(model, path, Path(source)).values()] + [path]


def save(model: onnx.ModelProto, path: str | os.PathLike, source: str | os.PathLike) -> None:
    """Write ``model`` to ``path`` atomically, its external data files copied from next to ``source`` where needed.

    ONNX Runtime looks for external data relative to the model file, so when ``path`` is in another folder
    the files go there too (each written atomically), named after ``path`` (``out.onnx.data``; the model's
    locations are rewritten to match), so that another model's data file of the same name is never replaced.
    A model in the same folder as ``source`` shares its files.
    """
    path, source = Path(path), Path(source)
    names = _copied_data(model, path, source)
    for location, name in names.items():
        _write_atomically(path.parent / name, lambda file, location=location: _copy(source.parent / location, file))
    for tensor in _external_tensors(model) if names else ():
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = names[entry.value]
    write_bytes(path, model.SerializeToString())


@contextlib.contextmanager
def temporary_copy(model: onnx.ModelProto, beside: str | os.PathLike) -> Iterator[Path]:
    """``model`` in a temporary file beside ``beside`` (so that the external data it names is found), removed after."""
    beside = Path(beside)
    handle, temporary = tempfile.mkstemp(dir=beside.parent, prefix=f".{beside.stem}-", suffix=".onnx")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(model.SerializeToString())
        yield Path(temporary)
    finally:
        Path(temporary).unlink(missing_ok=True)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a reader sees the old file or the whole new one."""
    _write_atomically(Path(path), lambda file: file.write(data))


def check_output(path: str | os.PathLike, flag: str, inputs: Iterable[str | os.PathLike] = ()) -> None:
    """Refuse, before any work, an output path that cannot be written or that is one of ``inputs``.

    Raises OutputError naming ``flag``: a folder, a missing folder, a folder this user cannot write, something
    that is not a regular file, or an input (the same file, also through symbolic or hard links).
    """
    path = Path(path)
    folder = path.absolute().parent
    if path.is_dir():
        raise OutputError(f"{flag} {path}: is a folder; give a file name")
    if not folder.is_dir():
        raise OutputError(f"{flag} {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{flag} {path}: cannot write in folder {folder} (permission denied)")
    if path.exists() and not path.is_file():
        raise OutputError(f"{flag} {path}: exists and is not a regular file")
    for source in inputs:
        if same_file(path, Path(source)):
            raise OutputError(f"{flag} {path}: is the input {source}; writing it would destroy it, choose another path")


def same_file(first: Path, second: Path) -> bool:
    """The same file: the same path once links are resolved, or the same inode (a hard link)."""
    if os.path.realpath(first) == os.path.realpath(second):
        return True
    try:
        return os.path.samefile(first, second)  # hard links
    except OSError:  # one of them does not exist
        return False


def _copy(source: Path, file: BinaryIO) -> None:
    with open(source, "rb") as data:
        shutil.copyfileobj(data, file, length=16 * 1024 * 1024)


def _file_mode() -> int:
    """What a new file gets under the process's umask (which can only be read by setting it)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def _write_atomically(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write through a temporary file in the same folder, renamed over ``path`` only once complete.

    The file gets the mode the umask gives a new file, as any tool's output does (a temporary file is 0600).
    """
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(handle, _file_mode())
        with os.fdopen(handle, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
