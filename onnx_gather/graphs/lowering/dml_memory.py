"""DirectML's memory in standard ONNX: the gather being lowered (``NativeGather``), the data's sizes and constants
(``Data``, ``Tensor``), and what DirectML reads for an out-of-bounds index: the coordinate from the index's low
32 bits (``words``), the linear offset in wrapping 32-bit arithmetic, clamped to the tensor's memory rounded up to
4 bytes, whose padding reads 0 (``read_at``, ``read_rows``; docs/semantics.md section 4.3)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnx_gather.core.contract import DIRECTML_16BIT
from onnx_gather.graphs.emit import Emitter


@dataclass(frozen=True)
class NativeGather:
    """One DML gather as the lowering writes it: the standard op, what it reads and writes, and how DirectML reads
    the data where an index is out of bounds."""

    op_type: str  # Gather, GatherElements or GatherND
    data: str
    dims: tuple[int | str | None, ...]  # the data's
    indices: str
    index_type: int
    index_rank: int
    data_type: int  # the data's element type, before a carrying Cast
    mode: str  # directml, or directml-16bit for 16-bit data that travels as FLOAT32
    output: str
    axis: int = 0  # Gather's and GatherElements' (GatherND: 0)
    batch: int = 0  # GatherND's batch dims
    tuple_length: int = 0  # GatherND's coordinates per index tuple

    @property
    def element_size(self) -> int:
        """The bytes of one element in DirectML's memory, which decide what it reads past the data's end."""
        return 2 if self.mode == DIRECTML_16BIT else helper.tensor_dtype_to_np_dtype(self.data_type).itemsize

    @property
    def signed(self) -> bool:
        return self.index_type in (TensorProto.INT32, TensorProto.INT64)

    @property
    def negative_reads(self) -> bool:
        """Whether DirectML reads some index values as negative: signed ones, and UINT64 ones from 2^63."""
        return self.signed or self.index_type == TensorProto.UINT64


def reduce_over(emit: Emitter, op_type: str, value: str, step: str) -> str:
    """A reduction of every element to a scalar (keepdims 0), in the form the opset takes."""
    return emit.node(op_type, [value], step, keepdims=0)


def minimum(emit: Emitter, a: str, b: str, step: str) -> str:
    # Not Min: ONNX Runtime 1.31's INT64 Min returned 4294967288 for Min(4294967288, 255) (pinned by
    # tests/test_workarounds.py).
    return emit.node("Where", [emit.node("Less", [a, b], f"{step}_less"), a, b], step)


def branch(name: str, nodes: list[onnx.NodeProto], out: str, data_type: int) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, data_type, None)])


class Data:
    """The data tensor's dims: constants where the model states them, else read off its shape when it runs."""

    def __init__(self, emit: Emitter, x: str, dims: Sequence[int | str | None]) -> None:
        self.x, self.rank, self._emit = x, len(dims), emit
        self.dims = tuple(d if isinstance(d, int) else None for d in dims)

    @functools.cached_property
    def shape(self) -> str:
        """The whole shape, read where the gather is (every branch sees it)."""
        return self._emit.node("Shape", [self.x], "data_shape")

    def known(self, start: int, end: int) -> list[int] | None:
        """``dims[start:end]``, if every one of them is known."""
        part = self.dims[start:end]
        return None if None in part else list(part)

    def sizes(self, emit: Emitter, start: int, end: int, step: str) -> str:
        """``shape[start:end]`` (1-D INT64)."""
        known = self.known(start, end)
        if known is not None:
            return emit.constant(known, np.int64, step)
        if (start, end) == (0, self.rank):
            return self.shape
        if emit.opset >= 15:  # not a Slice of the shape, which ONNX Runtime warns it cannot fold into subgraphs
            return emit.node("Shape", [self.x], step, start=start, end=end)
        return emit.slice(self.shape, start, end, step)

    def product(self, emit: Emitter, start: int, end: int, step: str) -> tuple[str, int | None]:
        """The product of ``shape[start:end]`` (a scalar), and its value where it is known."""
        known = self.known(start, end)
        if known is not None:
            value = math.prod(known)
            return emit.constant(value, np.int64, step), value
        return reduce_over(emit, "ReduceProd", self.sizes(emit, start, end, f"{step}_dims"), step), None

    def size(self, emit: Emitter, axis: int, step: str) -> tuple[str, int | None]:
        """``shape[axis]`` (a scalar), and its value where it is known."""
        known = self.known(axis, axis + 1)
        if known is not None:
            return emit.constant(known[0], np.int64, step), known[0]
        return emit.squeeze(self.sizes(emit, axis, axis + 1, f"{step}_dims"), [0], step), None


class Tensor:
    """Sizes and constants of the data tensor a gather reads, along ``axis`` (of size ``size``), made in ``emit``
    (the reading branch) when first used, so that none is left unused."""

    def __init__(self, emit: Emitter, data: Data, axis: int, size: str | None = None) -> None:
        self._emit, self._axis, self._size = emit, axis, size
        self.data, self.x = data, data.x
        known = data.known(axis, axis + 1)
        self.known_size = None if known is None else known[0]
        known = data.known(0, data.rank)
        self.known_count = None if known is None else math.prod(known)

    @functools.cached_property
    def size(self) -> str:
        return self._size or self.data.size(self._emit, self._axis, "size")[0]

    def _constant(self, value: object, step: str) -> str:
        return self._emit.constant(value, np.int64, step)

    @functools.cached_property
    def two32(self) -> str:
        return self._constant(2**32, "two32")

    @functools.cached_property
    def one(self) -> str:
        return self._constant(1, "one")

    @functools.cached_property
    def zero(self) -> str:
        return self._constant(0, "zero")

    @functools.cached_property
    def minus_one(self) -> str:
        return self._constant([-1], "minus_one")

    @functools.cached_property
    def outer(self) -> str:
        return self.data.product(self._emit, 0, self._axis, "outer")[0]

    @functools.cached_property
    def inner(self) -> str:
        return self.data.product(self._emit, self._axis + 1, self.data.rank, "inner")[0]

    @functools.cached_property
    def count(self) -> str:  # not Size: ONNX Runtime has no BFLOAT16 Size (tests/test_workarounds.py)
        return self.data.product(self._emit, 0, self.data.rank, "count")[0]


def axis_words(
    emit: Emitter, tensor: Tensor, index_values: str, size: tuple[str, int | list[int] | None], signed: bool
) -> str:
    """DirectML's coordinate of each INT64 index in ``index_values`` on a dimension of ``size`` (section 4.3, steps 1
    and 2); for GatherND's tuples, ``size`` holds the sizes of the tuples' dimensions (the last axis of the values).
    ``signed``: a negative value counts from the end (INT32 and INT64 indices, and UINT64 ones from 2^63, negative as
    INT64)."""
    size_value, known = size
    if signed:  # a negative index counts from the end: (w + size) mod 2^32, as (w mod 2^32 + size) mod 2^32 is
        negative = emit.node("Less", [index_values, tensor.zero], "negative")
        plus_size = emit.node("Add", [index_values, size_value], "plus_size")
        index_values = emit.node("Where", [negative, plus_size, index_values], "signed")
    words = emit.node("Mod", [index_values, tensor.two32], "low_word")
    if known is not None and 1 not in np.atleast_1d(known):
        return words
    return emit.node(
        "Where", [emit.node("Equal", [size_value, tensor.one], "size_one"), tensor.zero, words], "axis_word"
    )


def read_at(emit: Emitter, tensor: Tensor, gather: NativeGather, outer: str, words: str, inner: str) -> str:
    """What DirectML reads at outer position ``outer``, axis coordinate ``words`` and inner position ``inner``
    (broadcast together, then flattened; section 4.3, steps 3 to 5). The data has at least one element."""
    return read_rows(emit, tensor, gather, axis_rows(emit, tensor, outer, words), inner)


def linear_offsets(emit: Emitter, tensor: Tensor, row: str, inner: str | None) -> str:
    """The element offsets ``row * tensor.inner + inner`` (broadcast together, then flattened), mod 2^32; ``inner``
    None: slices of one element, ``row`` (1-D, below 2^32) holds the offsets (section 4.3 step 3, section 10 step 2)."""
    if inner is None:
        return row  # already taken mod 2^32
    offsets = emit.node("Add", [emit.node("Mul", [row, tensor.inner], "row_inner"), inner], "linear")
    return emit.node("Mod", [emit.node("Reshape", [offsets, tensor.minus_one], "flat_linear"), tensor.two32], "offset")


def axis_rows(emit: Emitter, tensor: Tensor, outer: str, words: str) -> str:
    """The row ``outer * size + words`` of each axis coordinate: its offset in units of ``tensor.inner``."""
    return emit.node("Add", [emit.node("Mul", [outer, tensor.size], "p_size"), words], "row")


def tuple_rows(emit: Emitter, tensor: Tensor, words: str, sizes: str, dims: range, rows: str | None = None) -> str:
    """The row of each index tuple of ``words`` (M, k) over the data's ``dims`` (k of them, their sizes ``sizes``,
    1-D), after ``rows`` (the rows of the dims before them, or None): Horner's rule, ``((rows * size0 + word0) *
    size1 + word1) ...``, each step taken mod 2^32 (section 4.3; section 10 step 2)."""
    data = tensor.data
    for j, d in enumerate(dims):
        word = emit.node("Gather", [words, emit.constant(j, np.int64, f"k{j}")], f"word{j}", axis=1)
        if rows is None:
            rows = word
            continue
        size = (
            data.size(emit, d, f"tuple_size{j}")[0]
            if data.known(d, d + 1)
            else (emit.node("Gather", [sizes, emit.constant(j, np.int64, f"k{j}")], f"tuple_size{j}", axis=0))
        )
        rows = emit.node("Add", [emit.node("Mul", [rows, size], f"scaled{j}"), word], f"row{j}")
        rows = emit.node("Mod", [rows, tensor.two32], f"rows{j}")
    return rows


def slice_rows(emit: Emitter, tensor: Tensor, rows: str, end: int) -> tuple[str, str | None]:
    """``rows`` (1-D) and the positions inside each slice of the data's dims from ``end`` on, as ``linear_offsets``
    and ``read_rows`` take them: ``rows`` alone where the slices are single elements."""
    data = tensor.data
    if data.known(end, data.rank) == []:
        return rows, None
    inner = all_positions(emit, tensor, data.known(end, data.rank), lambda: tensor.inner, [1, -1], "s")
    return emit.unsqueeze(rows, [1], "rows_column"), inner


def read_rows(emit: Emitter, tensor: Tensor, gather: NativeGather, row: str, inner: str | None) -> str:
    """What DirectML reads at element offset ``row * tensor.inner + inner`` (broadcast together, then flattened, mod
    2^32); ``inner`` None: slices of one element, ``row`` (1-D, below 2^32) holds the offsets."""
    offsets = linear_offsets(emit, tensor, row, inner)
    if tensor.known_count is None:
        last = emit.node("Sub", [tensor.count, tensor.one], "last")
    else:
        last = emit.constant(tensor.known_count - 1, np.int64, "last")
    flat = emit.node("Reshape", [tensor.x, tensor.minus_one], "flat")
    values = emit.node("GatherElements", [flat, minimum(emit, offsets, last, "clamped")], "read", axis=0)
    # Past the last element: the last element again if the memory ends there, else the padding's 0 (never for
    # elements of 4 or 8 bytes).
    element_size, data_type = gather.element_size, gather.data_type
    if element_size % 4 == 0 or (tensor.known_count is not None and tensor.known_count * element_size % 4 == 0):
        return values
    past_last = emit.node("Less", [last, offsets], "past_last")
    if tensor.known_count is not None:
        return overwrite(emit, values, past_last, data_type)
    size_bytes = emit.constant(element_size, np.int64, "element_size")
    bytes_ = emit.node("Mul", [tensor.count, size_bytes], "bytes")
    odd_bytes = emit.node("Mod", [bytes_, emit.constant(4, np.int64, "four")], "odd_bytes")
    padded = emit.node("Not", [emit.node("Equal", [odd_bytes, tensor.zero], "whole_words")], "padded")
    return overwrite(emit, values, emit.node("And", [past_last, padded], "reads_padding"), data_type)


def overwrite(emit: Emitter, values: str, where: str, data_type: int) -> str:
    """``values`` with 0 where ``where`` holds (a ScatterND, exact for every type)."""
    positions = emit.node("Transpose", [emit.node("NonZero", [where], "padding_positions")], "padding_at")
    zeros = emit.node(
        "ConstantOfShape",
        [emit.slice(emit.node("Shape", [positions], "padding_shape"), 0, 1, "padding_count")],
        "zeros",
        value=helper.make_tensor("zero", data_type, [1], [0]),
    )
    return emit.node("ScatterND", [values, positions, zeros], "zero_padding")


def position(emit: Emitter, at: str, shape: str, dims: range) -> str:
    """The linear position over ``dims`` of ``shape`` of each coordinate column of ``at`` (rank, M); 0 over none."""
    position = None
    for d in dims:
        row = emit.node("Gather", [at, emit.constant(d, np.int64, f"dim{d}")], f"coordinate{d}", axis=0)
        if position is None:
            position = row
            continue
        size = emit.node("Gather", [shape, emit.constant(d, np.int64, f"dim{d}_")], f"size{d}", axis=0)
        position = emit.node("Add", [emit.node("Mul", [position, size], f"scaled{d}"), row], f"position{d}")
    return emit.constant(0, np.int64, "origin") if position is None else position


def all_positions(
    emit: Emitter, tensor: Tensor, dims: list[int] | None, count: Callable[[], str], shape: list[int], step: str
) -> str:
    """0, 1, ... up to the product of ``dims`` (``count()``), reshaped to ``shape``: a constant where the model
    states the dims and they are few, else a Range."""
    if dims is not None and math.prod(dims) <= 4096:
        return emit.constant(np.arange(math.prod(dims), dtype=np.int64).reshape(shape), np.int64, step)
    return emit.node(
        "Reshape",
        [
            emit.node("Range", [tensor.zero, count(), tensor.one], f"{step}_range"),
            emit.constant(shape, np.int64, f"{step}_shape"),
        ],
        step,
    )


def gather_shape(emit: Emitter, data: Data, v_shape: str, axis: int) -> str:
    """The output shape of a Gather along ``axis`` with indices of shape ``v_shape``."""
    parts = [data.sizes(emit, 0, axis, "before"), v_shape, data.sizes(emit, axis + 1, data.rank, "after")]
    return emit.node("Concat", parts, "output_shape", axis=0)
