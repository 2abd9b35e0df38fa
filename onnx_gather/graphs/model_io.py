"""Reading and writing model files: external data left on disk, outputs written atomically, inputs untouched. The
one home of which paths a command may write (``outputs``, checked before any work) and how it writes them
(``Outputs``): never over a file it reads, never half."""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import re
import secrets
import shutil
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import onnx
from google.protobuf.message import DecodeError
from onnx.external_data_helper import ExternalDataInfo, load_external_data_for_tensor, uses_external_data

from onnx_gather.core.errors import UserError
from onnx_gather.graphs import files
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


# A model that takes less external data than this carries it inside (``inline_small_data``).
INLINE_BYTES = 2**28


def inline_small_data(model: onnx.ModelProto, source: str | os.PathLike) -> None:
    """Read into ``model`` (derived from the model file ``source``) the external data of its own tensors where they
    come to less than ``INLINE_BYTES`` together: written with ``save``, it then carries what it uses, not a copy of
    every data file of ``source`` (a window of a large model, ``reduce``)."""
    tensors = list(_external_tensors(model))
    folder = Path(source).parent
    _check_external_data(model, folder, Path(source))
    infos = [ExternalDataInfo(tensor) for tensor in tensors]
    sizes = [info.length or (folder / info.location).stat().st_size for info in infos]  # no length: the whole file
    if sum(sizes) >= INLINE_BYTES:
        return
    for tensor in tensors:
        load_external_data_for_tensor(tensor, str(folder))
        tensor.data_location = onnx.TensorProto.DEFAULT
        del tensor.external_data[:]


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
    _verify_checksums(model, path.parent, path)
    sort_topologically(model)  # ONNX Runtime runs nodes listed in any order; so does every command
    try:
        validate(model)
    except InvalidModel as error:
        raise ModelError(f"{path}: {error}") from None
    return model


_CHUNK = 16 * 1024 * 1024


def _data_names(locations: Sequence[str], path: Path) -> dict[str, str]:
    """Fresh names for the data files of one write of ``path``: ``out.onnx.<id>.data`` (``.<id>.1.data``, ...
    for several), which no other write uses, so that a model always comes with the data written with it."""
    while True:
        write = secrets.token_hex(6)
        if len(locations) == 1:
            names = {locations[0]: f"{path.name}.{write}.data"}
        else:
            names = {location: f"{path.name}.{write}.{n}.data" for n, location in enumerate(locations, start=1)}
        if not any((path.parent / name).exists() for name in names.values()):
            return names


def _stale_data(path: Path) -> re.Pattern:
    return re.compile(rf"{re.escape(path.name)}\.[0-9a-f]{{12}}(\.\d+)?\.data")


def save(model: onnx.ModelProto, path: str | os.PathLike, source: str | os.PathLike) -> None:
    """Write ``model`` to ``path`` atomically with its external data files, as one: a reader gets a model with the
    data written with it, or the previous pair, never one's model with the other's data.

    The data files (those of the model read from ``source``) get names of their own, ``out.onnx.<id>.data``:
    copied (streamed) from another folder, hard-linked in the same one (copied where links fail). Each is written
    before the model, whose rename is the one commit; the model records each file's SHA-1 as its ``checksum``
    (ONNX's own external data key, which onnx's checker, ``onnx.load`` and ONNX Runtime accept, where a key of our
    own would be refused), which ``load`` verifies. After the commit, data files of earlier writes of
    ``path`` that no model of the folder names any more are removed, unless another process is writing ``path``
    (then the last one to finish removes them), and so are onnx-gather's temporary files whose writer is gone.
    """
    path, source = Path(path), Path(source)
    folder = path.parent
    files.remove_leftovers(folder)
    names = _data_names(sorted(_check_external_data(model, source.parent, source)), path)

    def write(file: BinaryIO) -> None:  # the model's temporary file, open meanwhile, says a write is under way
        checksums = {location: _place(source.parent / location, folder / name) for location, name in names.items()}
        for tensor in _external_tensors(model):
            location = ExternalDataInfo(tensor).location
            for key in ("checksum", "location"):
                entries = [entry for entry in tensor.external_data if entry.key == key]
                entry = entries[0] if entries else tensor.external_data.add(key=key)
                entry.value = checksums[location] if key == "checksum" else names[location]
        file.write(model.SerializeToString())

    try:
        files.write_atomically(path, write)
    except BaseException:
        for name in names.values():  # fresh names: nobody else's files
            (folder / name).unlink(missing_ok=True)
        raise
    _remove_stale_data(path)


def _place(source: Path, target: Path) -> str:
    """``source``'s bytes at ``target`` (a new name): hard-linked in the same folder, else copied; their SHA-1."""
    if source.parent.resolve() == target.parent.resolve():
        try:
            os.link(source, target)
            return _sha1(target)
        except FileExistsError:
            raise
        except OSError:  # a file system without hard links, or a file the kernel does not let this user link
            pass
    digest = hashlib.sha1()

    def copy(file: BinaryIO) -> None:
        with open(source, "rb") as data:
            while chunk := data.read(_CHUNK):
                digest.update(chunk)
                file.write(chunk)

    files.write_atomically(target, copy)
    return digest.hexdigest()


def _sha1(path: Path) -> str:
    digest = hashlib.sha1()
    with open(path, "rb") as data:
        while chunk := data.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _remove_stale_data(path: Path) -> None:
    """Remove data files of earlier writes of ``path`` that no model of its folder names, unless one is being
    written (listed first, so that a file listed is either still being written, or named by the model now)."""
    folder = path.parent
    stale = [name for name in files.names(folder) if _stale_data(path).fullmatch(name)]
    if not stale or files.live_temporaries(folder, path.name):
        return
    models = [path, *(folder / n for n in files.names(folder) if n.lower().endswith(".onnx") and n != path.name)]
    for name in stale:
        if not any(_mentions(model, name) for model in models):
            (folder / name).unlink(missing_ok=True)


def _mentions(model: Path, name: str) -> bool:
    """Whether ``model``'s bytes hold ``name`` (as an external data location does); True when unreadable."""
    try:
        with open(model, "rb") as file:
            if not os.fstat(file.fileno()).st_size:
                return False
            with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return data.find(name.encode()) >= 0
    except (OSError, ValueError):
        return True


def _verify_checksums(model: onnx.ModelProto, folder: Path, path: Path) -> None:
    """Each external data file whose SHA-1 the model records (``checksum``, as onnx-gather writes) must match it."""
    digests: dict[str, str] = {}
    for tensor in _external_tensors(model):
        info = ExternalDataInfo(tensor)
        if not info.checksum:
            continue
        if info.location not in digests:
            digests[info.location] = _sha1(folder / info.location)
        if digests[info.location] != info.checksum.lower():
            raise ModelError(
                f"{path}: external data file {folder / info.location} is not the one this model was written with "
                "(its SHA-1 differs from the checksum the model records): replaced by another model's, or changed"
            )


def write_with_data(model: onnx.ModelProto, path: str | os.PathLike, folder: str | os.PathLike | None) -> None:
    """Write ``model`` to ``path``, in a folder of the caller's own, with the external data files it uses (in
    ``folder``; None for a model without) beside it under their locations, for a program that looks for them only
    beside the model's file: hard-linked where the file system allows, else copied. Not symbolic links: ONNX Runtime
    and OpenVINO refuse a data file whose real path lies outside the model's folder."""
    path = Path(path)
    locations = {ExternalDataInfo(tensor).location for tensor in _external_tensors(model)} if folder else set()
    for location in sorted(locations):
        source, target = Path(folder) / location, path.parent / location
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, target)
        except OSError:  # another file system, or a file the kernel does not let this user link
            shutil.copyfile(source, target)
    path.write_bytes(model.SerializeToString())


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a reader sees the old file or the whole new one."""
    files.write_atomically(Path(path), lambda file: file.write(data))


@dataclass(frozen=True)
class Outputs:
    """A command's output files by flag, as ``outputs`` checked them before any work. Each is written whole or not
    at all (``save``, ``write_bytes``, or a writer of the caller's that ends in ``write_bytes``, inside ``writing``),
    an OSError (a full disk, a quota) said as an OutputError naming the flag and the file."""

    paths: Mapping[str, str]  # as the user gave them

    @contextlib.contextmanager
    def writing(self, flag: str) -> Iterator[str]:
        """The path of ``flag``, for a write whose OSError is said as an OutputError naming the flag and the file."""
        path = self.paths[flag]
        try:
            yield path
        except OSError as error:
            raise OutputError(f"{flag} {path}: cannot write it: {error.strerror or error}") from error

    def save(self, flag: str, model: onnx.ModelProto, source: str | os.PathLike) -> None:
        """``save`` to the path of ``flag``."""
        with self.writing(flag) as path:
            save(model, path, source)

    def write_bytes(self, flag: str, data: bytes) -> None:
        """``write_bytes`` to the path of ``flag``."""
        with self.writing(flag) as path:
            write_bytes(path, data)


def outputs(
    paths: Mapping[str, str | os.PathLike | None],
    models: Iterable[tuple[str | os.PathLike, onnx.ModelProto]],
    reads: Iterable[str | os.PathLike | None] = (),
) -> Outputs:
    """The output ``paths`` by flag (None: not asked for), refused before any work where one could not be written
    or would destroy a file the user has: OutputError naming the flag, for a folder, a missing folder, a folder this
    user cannot write, something that is not a regular file, a file the command reads (one of ``models``, read from
    their paths, an external data file of one, one of ``reads``: the same file, also through symbolic or hard links),
    or the path of another output."""
    read = [Path(path) for path in reads if path is not None]
    for source, model in models:
        folder = Path(source).parent
        read += [Path(source), *(folder / name for name in sorted(_check_external_data(model, folder, Path(source))))]
    given: dict[str, str] = {}
    for flag, path in paths.items():
        if path is None:
            continue
        _check_output(Path(path), flag, read)
        for other, other_path in given.items():
            if _same_file(Path(path), Path(other_path)):
                raise OutputError(f"{flag} {path}: is also the {other} file; give each its own path")
        given[flag] = str(path)
    return Outputs(given)


def _check_output(path: Path, flag: str, reads: Iterable[Path]) -> None:
    folder = path.absolute().parent
    if path.is_dir():
        raise OutputError(f"{flag} {path}: is a folder; give a file name")
    if not folder.is_dir():
        raise OutputError(f"{flag} {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{flag} {path}: cannot write in folder {folder} (permission denied)")
    if path.exists() and not path.is_file():
        raise OutputError(f"{flag} {path}: exists and is not a regular file")
    for source in reads:
        if _same_file(path, source):
            raise OutputError(f"{flag} {path}: is the input {source}; writing it would destroy it, choose another path")


def _same_file(first: Path, second: Path) -> bool:
    """The same file: the same path once links are resolved, or the same inode (a hard link)."""
    if os.path.realpath(first) == os.path.realpath(second):
        return True
    try:
        return os.path.samefile(first, second)  # hard links
    except OSError:  # one of them does not exist
        return False
