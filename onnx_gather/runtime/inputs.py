"""Inputs for running a model: loaded from an .npz file, or generated from the model's input types and shapes."""

from __future__ import annotations

import io
import os
import re
import zipfile
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from onnx_gather.core.errors import UserError
from onnx_gather.core.words import listed
from onnx_gather.graphs import model_io
from onnx_gather.graphs.plumbing import bodies
from onnx_gather.graphs.types import ValueType, array_type


class InputError(UserError):
    """Inputs that cannot be loaded, parsed or generated; the message names the input."""


@dataclass(frozen=True)
class Feeds:
    """The arrays a model runs on, by input name, and which of them were generated from ``seed`` (the others were
    given)."""

    arrays: Mapping[str, np.ndarray]
    generated: frozenset[str] = frozenset()
    seed: int | None = None
    drawn: Mapping[str, str] = field(default_factory=dict)  # how each generated input was drawn (``drawn``)
    warning: str = ""  # the generated inputs whose dynamic dims were made 1 (``dynamic_hint``), "" for none

    @property
    def given(self) -> list[str]:
        return [name for name in self.arrays if name not in self.generated]

    def source(self, name: str) -> str:
        """Where input ``name`` came from: "given" or "generated"."""
        return "generated" if name in self.generated else "given"

    def said(self, name: str) -> str:
        """Where input ``name`` came from, in words: given, or generated and how."""
        how = self.drawn.get(name)
        return f"{self.source(name)}: {how}" if how else self.source(name)


def drawn(arrays: Mapping[str, np.ndarray], int_range: tuple[int, int]) -> dict[str, str]:
    """How ``generate`` drew each of ``arrays``: in words, for reports."""
    kinds = {"f": "standard normal", "b": "fair coins"}
    low, high = int_range
    return {name: kinds.get(a.dtype.kind, f"integers in [{low}, {high})") for name, a in arrays.items()}


def dims_text(shape: Sequence[int]) -> str:
    """A shape as ``--shape`` takes it: ``1x16``; ``scalar`` for none."""
    return "x".join(map(str, shape)) or "scalar"


def check_shapes(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> None:
    """Refuse a ``--shape`` that names no input of ``model``, or whose rank or sizes contradict what it declares."""
    values = {value.name: value for value in model_inputs(model)}
    unknown = sorted(set(shapes) - set(values))
    if unknown:
        default = unknown[0] in {value.name for value in with_defaults(model)}
        what = (
            "an input with a default (its initializer), never generated: give it with --inputs"
            if default
            else "which is not an input of the model"
        )
        raise InputError(f"--shape names {unknown[0]!r}, {what}")
    for name, shape in shapes.items():
        value_type = ValueType.of(values[name])
        dims = value_type.dims if value_type is not None else None
        if dims is None:
            continue
        if len(shape) != len(dims):
            raise InputError(f"--shape {name}: {len(shape)} dimensions given, the model says {len(dims)}")
        for axis, (given, declared) in enumerate(zip(shape, dims, strict=True)):
            if isinstance(declared, int) and given != declared:
                raise InputError(f"--shape {name}:{dims_text(shape)}: dimension {axis} is {declared} in the model")


def model_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The inputs a caller feeds: graph inputs that no initializer provides."""
    initialized = {t.name for t in model.graph.initializer}
    return [value for value in model.graph.input if value.name not in initialized]


def with_defaults(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The inputs a caller may feed, or leave to their initializer: from IR version 4, graph inputs that an
    initializer also provides, as ONNX Runtime takes them (before, every initializer is a graph input, a constant)."""
    if model.ir_version < 4:
        return []
    initialized = {t.name for t in model.graph.initializer}
    return [value for value in model.graph.input if value.name in initialized]


def _shape(value: onnx.ValueInfoProto, value_type: ValueType, shapes: Mapping[str, tuple[int, ...]]) -> tuple:
    if value.name in shapes:
        return shapes[value.name]
    if value_type.dims is None:
        raise InputError(f"input {value.name!r} has no shape in the model: give one with --shape {value.name}:DIMS")
    return tuple(d if isinstance(d, int) else 1 for d in value_type.dims)


def generate(
    model: onnx.ModelProto,
    shapes: Mapping[str, tuple[int, ...]] | None = None,
    seed: int = 0,
    int_range: tuple[int, int] = (0, 4),
    given: Mapping[str, np.ndarray] | None = None,
    max_elements: int = 2**31,
) -> dict[str, np.ndarray]:
    """One array per model input: ``given`` ones as they are, the others generated; an input with a default
    (``with_defaults``) only where given.

    Dynamic dims come from ``shapes`` (a whole shape per input name), else 1. Floats are standard normal;
    integers are drawn from ``int_range`` (low inclusive, high exclusive); booleans are fair coins.
    """
    shapes, given = shapes or {}, given or {}
    check_shapes(model, shapes)
    _check_given(model, {name: (np.asarray(a).dtype, np.asarray(a).shape) for name, a in given.items()})
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in model_inputs(model):
        if value.name in given:
            feeds[value.name] = np.asarray(given[value.name])
            continue
        value_type = ValueType.of(value)
        if value_type is None:
            raise InputError(f"input {value.name!r} is not a tensor; give it with --inputs")
        if value_type.elem_type == onnx.TensorProto.STRING:
            raise InputError(f"input {value.name!r} holds strings, which are not generated; give it with --inputs")
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(value_type.elem_type))
        shape = _shape(value, value_type, shapes)
        elements = int(np.prod(shape, dtype=object))
        if elements > max_elements:
            raise InputError(
                f"input {value.name!r} of shape {shape} would have {elements} elements, more than "
                f"--max-elements {max_elements}"
            )
        if dtype.kind == "f":
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[value.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            feeds[value.name] = rng.integers(*int_range, shape).astype(dtype)
    feeds.update((value.name, np.asarray(given[value.name])) for value in with_defaults(model) if value.name in given)
    return feeds


Declared = Mapping[str, tuple[np.dtype, tuple[int, ...]]]
"""Arrays by name as their type and shape, read from an .npz file's headers or taken from arrays in memory."""


def _check_given(model: onnx.ModelProto, given: Declared) -> None:
    """Refuse arrays of an --inputs file that the model has no input for (an input with a default is one), or of
    another type, rank or fixed size: every such array named in one line (at most 5 of each list, then how many
    more)."""
    plain, defaults = model_inputs(model), with_defaults(model)
    values = {value.name: value for value in (*plain, *defaults)}
    unknown = sorted(set(given) - set(values))
    problems = []
    if unknown:
        names = listed((value.name for value in plain), quoted=False) or "none"
        if defaults:
            names += f"; with a default: {listed((value.name for value in defaults), quoted=False)}"
        problems.append(f"holds {listed(unknown)}, which the model has no input for (its inputs: {names})")
    for name, (dtype, shape) in given.items():
        value_type = ValueType.of(values[name]) if name in values else None
        if value_type is None:
            continue
        wanted = onnx.TensorProto.DataType.Name(value_type.elem_type)
        if array_type(dtype) != wanted:
            problems.append(f"array {name!r} is {array_type(dtype)} where the model takes {wanted}")
            continue
        dims = value_type.dims
        if dims is not None and (
            len(dims) != len(shape) or any(isinstance(d, int) and d != n for d, n in zip(dims, shape, strict=True))
        ):
            declared = "x".join(str(d) if isinstance(d, int) else f"<{d or '?'}>" for d in dims) or "a scalar"
            problems.append(f"array {name!r} has shape {dims_text(shape)} where the model takes {declared}")
    if len(problems) > 6:
        problems[6:] = [f"and {len(problems) - 6:,} more problems"]
    if problems:
        raise InputError(f"--inputs {'; '.join(problems)}")


def dynamic_hint(
    model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]] | None = None, given: Sequence[str] = ()
) -> str:
    """For a run that failed: the generated inputs whose dynamic dims were made 1, and the ``--shape`` to give."""
    shapes = shapes or {}
    named, options = [], []
    for value in model_inputs(model):
        value_type = ValueType.of(value)
        if value.name in given or value.name in shapes or value_type is None or value_type.dims is None:
            continue
        if all(isinstance(d, int) for d in value_type.dims):
            continue
        declared = ",".join(str(d) if d is not None else "?" for d in value_type.dims)
        generated = "x".join(str(d) if isinstance(d, int) else "1" for d in value_type.dims)
        named.append(f"{value.name} [{declared}] as {generated}")
        options.append(
            f"--shape {value.name}:"
            + "x".join(str(d) if isinstance(d, int) else f"<{d or '?'}>" for d in value_type.dims)
        )
    if not named:
        return ""
    return f"dynamic dims were generated as 1 ({'; '.join(named)}): give real sizes with {' '.join(options)}"


# ONNX Runtime's CPU kernels name the node, then say how an index was out of range (Gather gives the bounds).
_OUT_OF_RANGE = re.compile(
    r"Name:'(?P<node>[^']*)'.*?(?:idx=-?\d+ must be within the inclusive range \[(?P<low>-?\d+),(?P<high>-?\d+)\]"
    r"|out of range value in index|invalid indice)",
    re.IGNORECASE | re.DOTALL,
)


def index_hint(model: onnx.ModelProto, message: str, generated: Collection[str], int_range: tuple[int, int]) -> str:
    """For a run that failed on an out-of-range index: the generated integer inputs the node's indices come from,
    and the ``--int-range`` or ``--inputs`` to give instead; "" if the message is not of that kind or no generated
    input leads there."""
    match = _OUT_OF_RANGE.search(message)
    nodes = {node.name: node for body in bodies(model) for node in body.nodes if node.name}
    node = nodes.get(match["node"]) if match else None
    if node is None or len(node.input) < 2:
        return ""
    producers = {output: n for body in bodies(model) for n in body.nodes for output in n.output}
    sources, seen, pending = [], set(), [node.input[1]]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in generated:
            sources.append(name)
        elif name in producers:
            pending.extend(producers[name].input)
    if not sources:
        return ""
    low, high = int_range
    names = ", ".join(sorted(sources))
    takes = f", which takes [{match['low']}, {match['high']}]" if match["low"] is not None else ""
    smaller = f"--int-range 0:{int(match['high']) + 1}" if match["low"] is not None else "a smaller --int-range"
    return (
        f"the generated integer input {names} (drawn from --int-range {low}:{high}) reaches the indices of "
        f"{node.op_type} node {node.name!r}{takes}: give {smaller}, or real values with --inputs"
    )


_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _declared(path: Path) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """The arrays of an .npz file as their headers declare them, read from the zip directory and each member's
    .npy header only: refuses a member that is not an .npy array, or whose size is not what its header declares."""
    declared = {}
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            where = f"{path}: member {info.filename!r}"
            if not info.filename.endswith(".npy"):
                raise InputError(f"{where} is not an .npy array")
            try:
                with archive.open(info) as member:
                    shape, _, dtype = _HEADERS[np.lib.format.read_magic(member)](member)
                    header = member.tell()
            except (KeyError, ValueError, EOFError, zipfile.BadZipFile) as error:
                raise InputError(f"{where}: not a readable .npy header ({type(error).__name__})") from None
            size = header + int(np.prod(shape, dtype=object)) * dtype.itemsize
            if info.file_size != size:
                raise InputError(
                    f"{where} declares {dtype.name} {dims_text(shape)} ({size:,} bytes with its "
                    f"header) but holds {info.file_size:,} bytes"
                )
            declared[info.filename.removesuffix(".npy")] = (dtype, tuple(shape))
    return declared


def load_npz(
    path: str | os.PathLike, model: onnx.ModelProto | None = None, max_elements: int | None = None
) -> dict[str, np.ndarray]:
    """The arrays of an .npz file, by name. Before any array is read, the zip directory and the arrays' headers
    are checked: every member an .npy array of the size its header declares, of at most ``max_elements`` elements
    (if given), and with ``model`` one of its inputs, of its type, rank and fixed sizes."""
    try:
        declared = _declared(Path(path))
        for name, (_, shape) in declared.items():
            elements = int(np.prod(shape, dtype=object))
            if max_elements is not None and elements > max_elements:
                raise InputError(
                    f"--inputs {path}: array {name!r} of shape {dims_text(shape)} has {elements:,} "
                    f"elements, more than --max-elements {max_elements}"
                )
        if model is not None:
            _check_given(model, declared)
        with np.load(Path(path), allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except InputError:
        raise
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except Exception as error:  # a broken archive fails in many ways (BadZipFile, EOFError, ValueError, ...)
        raise InputError(f"{path}: not a readable .npz file of arrays ({type(error).__name__})") from None


def save_npz(path: str | os.PathLike, arrays: Mapping[str, np.ndarray]) -> None:
    """Write ``arrays`` to an .npz file (uncompressed), replacing it whole."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    model_io.write_bytes(path, buffer.getvalue())


def for_onnxruntime(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The feeds as ONNX Runtime's Python binding reads them whole: it cuts each string of a numpy ``str`` array at
    its first NUL, misreads ``bytes`` arrays and takes a ``bytes`` element for its repr, so every STRING feed goes as
    an object array of ``str`` (``bytes`` decoded as UTF-8, as ONNX Runtime holds them). ml_dtypes' types (BFLOAT16,
    the FLOAT8s, the 4- and 2-bit ones) it does not take at all: refused here naming the input."""
    arrays = {name: np.asarray(value) for name, value in feeds.items()}
    for name, array in arrays.items():
        if array.dtype.kind != "V":
            continue
        try:
            element = onnx.TensorProto.DataType.Name(helper.np_dtype_to_tensor_dtype(array.dtype))
        except ValueError:
            continue  # a void array of no ONNX type: ONNX Runtime says so
        raise UserError(
            f"input {name!r} is {element}, which ONNX Runtime's Python binding does not take (the dml "
            "and evaluator backends do)"
        )
    return {name: _strings(name, array) if array.dtype.kind in "OSU" else array for name, array in arrays.items()}


def _strings(name: str, array: np.ndarray) -> np.ndarray:
    result = np.empty(array.shape, dtype=object)
    for position, item in np.ndenumerate(array):
        try:
            result[position] = item.decode("utf-8") if isinstance(item, bytes) else item
        except UnicodeDecodeError:
            raise UserError(
                f"input {name!r}: the bytes at {list(position)} are not UTF-8, which ONNX Runtime's "
                "Python binding cannot take"
            ) from None
    return result
