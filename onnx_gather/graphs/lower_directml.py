"""``out_of_bounds=directml`` in standard ONNX: what real DirectML reads (docs/semantics.md, section 4.3).

An ``If`` on "is any index out of bounds?" keeps the native op for the common case. Its other branch runs the
native op on the indices with the out-of-bounds ones set to 0, then overwrites just the elements those indices
produced with DirectML's reading of them: the axis coordinate from the index's low 32 bits (plus the axis size if
the whole value is negative; 0 on an axis of size 1), the linear offset in wrapping 32-bit arithmetic, clamped to
the tensor's memory rounded up to 4 bytes, whose padding reads 0. Offsets stay below 2^63 in INT64 for tensors of
fewer than 2^31 elements, DirectML's own limit. Data of no elements reads 0 everywhere.

Every pass over a whole tensor is one ONNX Runtime runs fast: the test is two ``Less`` and a byte reduction, the
repair a ``NonZero``, a ``ScatterElements`` zeroing the bad indices (a ``Where`` on GatherND's tuples) and one
``ScatterND`` (``ScatterElements`` for Gather's slices) of the repaired elements. No ``Where`` or ``Min`` touches the
data (``Where`` changes FLOAT16 NaN payloads) and no INT64 ``Min``, ``Clip`` or ``ReduceMax`` sees an index (ONNX
Runtime 1.31 gets them wrong beyond the int32 range). GatherND repairs whole tuples the same way.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnx_gather.core.contract import DIRECTML_16BIT
from onnx_gather.graphs.graph import Emitter

MIN_OPSET = 11  # Range, NonZero, ScatterND, ScatterElements, If with outer-scope values, Mod


def _reduce(emit: Emitter, op_type: str, value: str, step: str) -> str:
    """A reduction of every element to a scalar (keepdims 0), in the form the opset takes."""
    return emit.node(op_type, [value], step, keepdims=0)


def _minimum(emit: Emitter, a: str, b: str, step: str) -> str:
    # Not Min: ONNX Runtime 1.31's INT64 Min returns 4294967288 for Min(4294967288, 255).
    return emit.node("Where", [emit.node("Less", [a, b], f"{step}_less"), a, b], step)


def _branch(name: str, nodes: list[onnx.NodeProto], out: str, data_type: int) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, data_type, None)])


class _Data:
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
        return _reduce(emit, "ReduceProd", self.sizes(emit, start, end, f"{step}_dims"), step), None

    def size(self, emit: Emitter, axis: int, step: str) -> tuple[str, int | None]:
        """``shape[axis]`` (a scalar), and its value where it is known."""
        known = self.known(axis, axis + 1)
        if known is not None:
            return emit.constant(known[0], np.int64, step), known[0]
        return emit.squeeze(self.sizes(emit, axis, axis + 1, f"{step}_dims"), [0], step), None


class _Tensor:
    """Sizes and constants of the data tensor a gather reads, along ``axis`` (of size ``size``), made in ``emit``
    (the reading branch) when first used, so that none is left unused."""

    def __init__(self, emit: Emitter, data: _Data, axis: int, size: str | None = None) -> None:
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
    def count(self) -> str:  # not Size: ONNX Runtime has no BFLOAT16 Size
        return self.data.product(self._emit, 0, self.data.rank, "count")[0]


def _words(emit: Emitter, t: _Tensor, w: str, size: tuple[str, int | list[int] | None], signed: bool) -> str:
    """DirectML's coordinate of each INT64 index in ``w`` on a dimension of ``size`` (section 4.3, steps 1, 2); for
    GatherND's tuples, ``size`` holds the sizes of the tuples' dimensions (the last axis of ``w``). ``signed``: a
    negative ``w`` counts from the end (INT32 and INT64 indices, and UINT64 ones from 2^63, negative as INT64)."""
    size_value, known = size
    if signed:  # a negative index counts from the end: (w + size) mod 2^32, as (w mod 2^32 + size) mod 2^32 is
        w = emit.node("Where", [emit.node("Less", [w, t.zero], "negative"),
                                emit.node("Add", [w, size_value], "plus_size"), w], "signed")  # fmt: skip
    words = emit.node("Mod", [w, t.two32], "low_word")
    if known is not None and 1 not in np.atleast_1d(known):
        return words
    return emit.node("Where", [emit.node("Equal", [size_value, t.one], "size_one"), t.zero, words], "axis_word")


def _read(emit: Emitter, t: _Tensor, p: str, words: str, s: str, data_type: int, element_size: int) -> str:
    """What DirectML reads at outer position ``p``, axis coordinate ``words`` and inner position ``s`` (broadcast
    together, then flattened; section 4.3, steps 3 to 5). The data has at least one element."""
    row = emit.node("Add", [emit.node("Mul", [p, t.size], "p_size"), words], "row")
    return _read_rows(emit, t, row, s, data_type, element_size)


def _read_rows(emit: Emitter, t: _Tensor, row: str, s: str | None, data_type: int, element_size: int) -> str:
    """What DirectML reads at element offset ``row * inner + s`` (broadcast together, then flattened, mod 2^32); ``s``
    None: slices of one element, ``row`` (1-D, below 2^32) holds the offsets."""
    if s is None:
        offsets = row  # already taken mod 2^32
    else:
        offsets = emit.node("Add", [emit.node("Mul", [row, t.inner], "row_inner"), s], "linear")
        offsets = emit.node("Mod", [emit.node("Reshape", [offsets, t.minus_one], "flat_linear"), t.two32], "offset")
    if t.known_count is None:
        last = emit.node("Sub", [t.count, t.one], "last")
    else:
        last = emit.constant(t.known_count - 1, np.int64, "last")
    flat = emit.node("Reshape", [t.x, t.minus_one], "flat")
    values = emit.node("GatherElements", [flat, _minimum(emit, offsets, last, "clamped")], "read", axis=0)
    # Past the last element: the last element again if the memory ends there, else the padding's 0 (never for
    # elements of 4 or 8 bytes).
    if element_size % 4 == 0 or (t.known_count is not None and t.known_count * element_size % 4 == 0):
        return values
    past_last = emit.node("Less", [last, offsets], "past_last")
    if t.known_count is not None:
        return _overwrite(emit, values, past_last, data_type)
    size_bytes = emit.constant(element_size, np.int64, "element_size")
    bytes_ = emit.node("Mul", [t.count, size_bytes], "bytes")
    odd_bytes = emit.node("Mod", [bytes_, emit.constant(4, np.int64, "four")], "odd_bytes")
    padded = emit.node("Not", [emit.node("Equal", [odd_bytes, t.zero], "whole_words")], "padded")
    return _overwrite(emit, values, emit.node("And", [past_last, padded], "reads_padding"), data_type)


def _overwrite(emit: Emitter, values: str, where: str, data_type: int) -> str:
    """``values`` with 0 where ``where`` holds (a ScatterND, exact for every type)."""
    positions = emit.node("Transpose", [emit.node("NonZero", [where], "padding_positions")], "padding_at")
    zeros = emit.node(
        "ConstantOfShape", [emit.slice(emit.node("Shape", [positions], "padding_shape"), 0, 1, "padding_count")],
        "zeros", value=helper.make_tensor("zero", data_type, [1], [0]),
    )  # fmt: skip
    return emit.node("ScatterND", [values, positions, zeros], "zero_padding")


def _position(emit: Emitter, at: str, shape: str, dims: range) -> str:
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


def _repair(
    emit: Emitter, t: _Tensor, v: str, outside: str, index_type: int, axis: int, index_rank: int,
    gather: bool, signed: bool, data_type: int, element_size: int,
) -> str:  # fmt: skip
    """The native op on ``v`` with its out-of-bounds values (``outside``) set to 0, and the elements they produced
    overwritten with DirectML's reading. The data has at least one element. The last node writes the output (a
    Reshape there would copy it once more), except for a Gather whose indices are not 1-D."""
    flat, rank = gather and index_rank != 1, t.data.rank
    if gather:
        outside_list = emit.node("Reshape", [outside, t.minus_one], "flat_outside") if flat else outside
        at = emit.node("NonZero", [outside_list], "outside_at")  # (1, M)
        q = emit.node("Reshape", [at, t.minus_one], "outside_positions")
    else:
        at = emit.node("NonZero", [outside], "outside_at")  # (rank, M)
        # Where each sits in the indices, flattened (ScatterElements and GatherElements beat ScatterND and GatherND).
        v_shape = emit.node("Shape", [v], "indices_shape")
        q = _position(emit, at, v_shape, range(rank))
    flat_v = v if gather and index_rank == 1 else emit.node("Reshape", [v, t.minus_one], "flat_indices")
    # Indices (not data: exact) with the out-of-bounds ones 0; flat for a Gather whose indices are not 1-D, whose
    # slices are put back in that form. GatherElements' indices are as many as its output: there a ScatterElements of
    # the few zeros beats a Where over them all (3x on 4 million indices).
    if gather:
        zero_index = emit.constant(0, np.int32 if index_type == TensorProto.INT32 else np.int64, "zero_index")
        safe = emit.node("Where", [outside_list, zero_index, flat_v] if flat else [outside, zero_index, v], "safe")
    else:
        zero_type = TensorProto.INT32 if index_type == TensorProto.INT32 else TensorProto.INT64
        zero_index = helper.make_tensor("zero", zero_type, [1], [0])
        zeros = emit.node("ConstantOfShape", [emit.node("Shape", [q], "outside_count")], "zeros", value=zero_index)
        safe_flat = emit.node("ScatterElements", [flat_v, q, zeros], "safe_flat", axis=0)
        safe = emit.node("Reshape", [safe_flat, v_shape], "safe")
    native = emit.node("Gather" if gather else "GatherElements", [t.x, safe], "native", axis=axis)

    w = emit.node("GatherElements", [flat_v, q], "outside_values", axis=0)
    if index_type == TensorProto.INT32:
        w = emit.node("Cast", [w], "outside_int64", to=TensorProto.INT64)
    words = _words(emit, t, w, (t.size, t.known_size), signed or index_type == TensorProto.UINT64)
    if not gather:  # single elements, at their coordinates in the indices (the data's sizes off the axis)
        shape = t.data.sizes(emit, 0, rank, "data_sizes")
        p, s = _position(emit, at, shape, range(axis)), _position(emit, at, shape, range(axis + 1, rank))
        values = _read(emit, t, p, words, s, data_type, element_size)
        coordinates = emit.node("Transpose", [at], "outside_coordinates")  # (M, rank)
        return emit.node("ScatterND", [native, coordinates, values], "directml")
    # Slices: every outer and inner position of each out-of-bounds index, (P, M, S), put back along the axis.
    p = _positions(emit, t, t.data.known(0, axis), lambda: t.outer, [-1, 1, 1], "p")
    s = _positions(emit, t, t.data.known(axis + 1, rank), lambda: t.inner, [1, 1, -1], "s")
    words = emit.node("Reshape", [words, emit.constant([1, -1, 1], np.int64, "words_shape")], "words_3d")
    values = _read(emit, t, p, words, s, data_type, element_size)
    before, after = t.data.known(0, axis), t.data.known(axis + 1, rank)
    if before is not None and after is not None:
        spread = emit.constant([*before, -1, *after], np.int64, "spread")
    else:
        parts = [t.data.sizes(emit, 0, axis, "before"), t.minus_one, t.data.sizes(emit, axis + 1, rank, "after")]
        spread = emit.node("Concat", parts, "spread", axis=0)
    values = emit.node("Reshape", [values, spread], "values")
    q = emit.node("Reshape", [q, emit.constant([1] * axis + [-1] + [1] * (rank - axis - 1), np.int64, "q_shape")],
                  "q")  # fmt: skip
    slots = emit.node("Expand", [q, emit.node("Shape", [values], "values_shape")], "slots")
    fixed = emit.node("ScatterElements", [native, slots, values], "directml" if not flat else "repaired", axis=axis)
    if not flat:
        return fixed
    v_shape = emit.node("Shape", [v], "indices_shape")
    return emit.node("Reshape", [fixed, _gather_shape(emit, t.data, v_shape, axis)], "directml")


def _positions(
    emit: Emitter, t: _Tensor, dims: list[int] | None, count: Callable[[], str], shape: list[int], step: str
) -> str:
    """0, 1, ... up to the product of ``dims`` (``count()``), reshaped to ``shape``: a constant where the model
    states the dims and they are few, else a Range."""
    if dims is not None and math.prod(dims) <= 4096:
        return emit.constant(np.arange(math.prod(dims), dtype=np.int64).reshape(shape), np.int64, step)
    return emit.node("Reshape", [emit.node("Range", [t.zero, count(), t.one], f"{step}_range"),
                                 emit.constant(shape, np.int64, f"{step}_shape")], step)  # fmt: skip


def _gather_shape(emit: Emitter, data: _Data, v_shape: str, axis: int) -> str:
    """The output shape of a Gather along ``axis`` with indices of shape ``v_shape``."""
    parts = [data.sizes(emit, 0, axis, "before"), v_shape, data.sizes(emit, axis + 1, data.rank, "after")]
    return emit.node("Concat", parts, "output_shape", axis=0)


def _outside(
    emit: Emitter, v: str, limit: str, known: int | list[int] | None, dtype: type, signed: bool
) -> tuple[str, str]:
    """Where ``v`` is out of bounds of ``limit`` (broadcast), and whether anywhere: below -limit (below 0 for unsigned
    indices, also those that became negative as INT64) or not below limit. Where v is below the low bound it is also
    below limit: the two tests agree exactly outside. ``known``: the limits, where the model states them."""
    if not signed:
        low = emit.constant(0, np.int64, "low")
    elif known is not None:
        low = emit.constant(np.negative(known), dtype, "low")
    else:
        low = emit.node("Neg", [limit], "low")
    below_size, below_low = emit.node("Less", [v, limit], "below_size"), emit.node("Less", [v, low], "below_low")
    outside = emit.node("Equal", [below_size, below_low], "outside")
    # ReduceMax of a byte per index, 0 over no indices; before opset 12, which has no UINT8 ReduceMax, ReduceSum of
    # INT32 flags (an empty INT32 ReduceMax is -2^31, which would read as "some index is outside").
    if emit.opset >= 12:
        flags = emit.node("Cast", [outside], "outside_flags", to=TensorProto.UINT8)
        highest = emit.node("ReduceMax", [flags], "any_flag", keepdims=0)
    else:
        flags = emit.node("Cast", [outside], "outside_flags", to=TensorProto.INT32)
        highest = emit.node("ReduceSum", [flags], "any_flag", keepdims=0)
    return outside, emit.node("Cast", [highest], "any_outside", to=TensorProto.BOOL)


def _guarded(
    emit: Emitter, condition: str, reading: Emitter, t: _Tensor, out_shape: Callable[[Emitter], str],
    repair: Callable[[Emitter], str], native: Emitter, fast: str, data_type: int, output: str,
) -> None:  # fmt: skip
    """``output`` = ``If(condition)``: ``reading``'s nodes (``t``), then DirectML's reading (what ``repair`` makes,
    or 0s of ``out_shape`` where the data has no element); else the native op (``fast`` of ``native``). Where the
    model states the data's element count, only the reading that applies is made (no second If)."""
    value = helper.make_tensor("zero", data_type, [1], [0])
    if t.known_count != 0:
        exact = reading.fork()
        result = repair(exact)
    if t.known_count is None:  # no data: every element reads 0
        zeros = reading.fork()
        zeros_out = zeros.node("ConstantOfShape", [out_shape(zeros)], "zeros", value=value)
        read = reading.node(
            "If", [reading.node("Less", [t.count, t.one], "no_data")], "if_no_data",
            then_branch=_branch("no_data", zeros.nodes, zeros_out, data_type),
            else_branch=_branch("repair", exact.nodes, result, data_type),
        )  # fmt: skip
        then_nodes = reading.nodes
    elif t.known_count == 0:
        read = reading.node("ConstantOfShape", [out_shape(reading)], "zeros", value=value)
        then_nodes = reading.nodes
    else:
        read, then_nodes = result, reading.nodes + exact.nodes
    emit.node(
        "If", [condition], "if_outside", output,
        then_branch=_branch("directml_reading", then_nodes, read, data_type),
        else_branch=_branch("in_bounds", native.nodes, fast, data_type),
    )  # fmt: skip


def _index_dtype(index_type: int) -> type:
    return np.int32 if index_type == TensorProto.INT32 else np.int64


def directml_gather(
    emit: Emitter, x: str, dims: Sequence[int | str | None], indices: str, index_type: int, axis: int,
    index_rank: int, gather: bool, data_type: int, mode: str, output: str,
) -> None:  # fmt: skip
    """``output`` = Gather or GatherElements of ``x`` (of ``dims``) at ``indices`` (of ``index_rank``) along ``axis``
    as DirectML reads it (``mode`` ``directml``, or ``directml-16bit`` for 16-bit data that travels as FLOAT32)."""
    element_size = 2 if mode == DIRECTML_16BIT else helper.tensor_dtype_to_np_dtype(data_type).itemsize
    signed = index_type in (TensorProto.INT32, TensorProto.INT64)
    # The native ops take INT32 and INT64. Unsigned values from 2^63 are negative as INT64: out of bounds either way.
    v = indices if signed else emit.node("Cast", [indices], "as_int64", to=TensorProto.INT64)
    data = _Data(emit, x, dims)
    size = data.size(emit, axis, "size")
    limit = size[0]
    if index_type == TensorProto.INT32:
        known = size[1]
        limit = emit.constant(known, np.int32, "size_int32") if known is not None else (
            emit.node("Cast", [limit], "size_int32", to=index_type))  # fmt: skip
    outside, condition = _outside(emit, v, limit, size[1], _index_dtype(index_type), signed)
    reading = emit.fork()
    t = _Tensor(reading, data, axis, size[0])

    def out_shape(branch: Emitter) -> str:
        v_shape = branch.node("Shape", [v], "index_shape")
        return _gather_shape(branch, data, v_shape, axis) if gather else v_shape

    def repair(exact: Emitter) -> str:
        return _repair(exact, t, v, outside, index_type, axis, index_rank, gather, signed, data_type, element_size)

    native = emit.fork()
    fast = native.node("Gather" if gather else "GatherElements", [x, v], "native", axis=axis)
    _guarded(emit, condition, reading, t, out_shape, repair, native, fast, data_type, output)


def directml_gather_nd(
    emit: Emitter, x: str, dims: Sequence[int | str | None], indices: str, index_type: int, index_rank: int,
    batch: int, k: int, data_type: int, mode: str, output: str,
) -> None:  # fmt: skip
    """``output`` = GatherND of ``x`` (of ``dims``) at ``indices`` (of ``index_rank``, tuples of ``k``) with ``batch``
    batch dims as DirectML reads it: the native op on the tuples with the out-of-bounds ones set to 0, and the
    slices of those read at each tuple's linear position (section 4.3, in wrapping 32-bit arithmetic) and
    scattered in."""
    element_size = 2 if mode == DIRECTML_16BIT else helper.tensor_dtype_to_np_dtype(data_type).itemsize
    signed = index_type in (TensorProto.INT32, TensorProto.INT64)
    v = indices if index_type == TensorProto.INT64 else emit.node("Cast", [indices], "as_int64", to=TensorProto.INT64)
    data = _Data(emit, x, dims)
    rank = data.rank
    sizes = data.sizes(emit, batch, batch + k, "tuple_sizes")
    outside_at, condition = _outside(emit, v, sizes, data.known(batch, batch + k), np.int64, signed)
    reading = emit.fork()
    t = _Tensor(reading, data, batch + k - 1)

    tuples = v

    def out_shape(branch: Emitter) -> str:
        tuple_dims = branch.slice(branch.node("Shape", [tuples], "v_shape"), 0, -1, "tuple_dims")
        return branch.node("Concat", [tuple_dims, data.sizes(branch, batch + k, rank, "trailing")], "output_shape",
                           axis=0)  # fmt: skip

    fast_path = emit.fork()
    fast = fast_path.node("GatherND", [x, v], "native", **({"batch_dims": batch} if batch else {}))

    def repair(exact: Emitter) -> str:
        v, outside = tuples, outside_at
        if index_rank == 1:  # a single tuple (no batch dims): as a list of one, the output reshaped at the end
            v, outside = exact.unsqueeze(v, [0], "v_list"), exact.unsqueeze(outside, [0], "outside_list")
        # Which tuples have a coordinate outside, where they are, and what they hold.
        tuple_outside = functools.reduce(
            lambda a, b: exact.node("Or", [a, b], "tuple_outside"),
            (exact.node("Gather", [outside, exact.constant(j, np.int64, f"j{j}")], f"outside{j}", axis=-1)
             for j in range(k)),
        )  # fmt: skip
        at = exact.node("NonZero", [tuple_outside], "outside_at")  # (index rank - 1, M)
        coordinates = exact.node("Transpose", [at], "outside_coordinates")  # (M, index rank - 1)
        bad = exact.node("GatherND", [v, coordinates], "outside_tuples")  # (M, k)
        safe = exact.node("Where", [exact.unsqueeze(tuple_outside, [-1], "outside_column"), t.zero, v], "safe_tuples")
        native = exact.node("GatherND", [x, safe], "native", **({"batch_dims": batch} if batch else {}))
        # Each bad tuple's linear position, in wrapping 32-bit arithmetic: its batch's position, then each coordinate
        # (Horner's rule: ((b * size0 + word0) * size1 + word1) ..., each step taken mod 2^32).
        negative = signed or index_type == TensorProto.UINT64  # a UINT64 from 2^63 is negative, as an INT64
        words = _words(exact, t, bad, (sizes, data.known(batch, batch + k)), negative)  # (M, k)
        rows = None if batch == 0 else _position(exact, at, exact.node("Shape", [v], "indices_shape"), range(batch))
        for j in range(k):
            word = exact.node("Gather", [words, exact.constant(j, np.int64, f"k{j}")], f"word{j}", axis=1)
            if rows is None:
                rows = word
                continue
            size = (
                data.size(exact, batch + j, f"tuple_size{j}")[0]
                if data.known(batch + j, batch + j + 1)
                else (exact.node("Gather", [sizes, exact.constant(j, np.int64, f"k{j}")], f"tuple_size{j}", axis=0))
            )
            rows = exact.node("Add", [exact.node("Mul", [rows, size], f"scaled{j}"), word], f"row{j}")
            rows = exact.node("Mod", [rows, t.two32], f"rows{j}")
        if data.known(batch + k, rank) == []:  # slices of one element: each row is one offset
            values = _read_rows(exact, t, rows, None, data_type, element_size)
        else:
            s = _positions(exact, t, data.known(batch + k, rank), lambda: t.inner, [1, -1], "s")
            values = _read_rows(exact, t, exact.unsqueeze(rows, [1], "rows_column"), s, data_type, element_size)
        trailing = data.sizes(exact, batch + k, rank, "trailing")
        slices = exact.node("Concat", [t.minus_one, trailing], "slices_shape", axis=0)
        values = exact.node("Reshape", [values, slices], "slices")
        result = exact.node("ScatterND", [native, coordinates, values], "directml" if index_rank > 1 else "repaired")
        if index_rank == 1:
            result = exact.node("Reshape", [result, out_shape(exact)], "directml")
        return result

    _guarded(emit, condition, reading, t, out_shape, repair, fast_path, fast, data_type, output)
