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

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnx_gather.graph import Emitter
from onnx_gather.semantics import DIRECTML_16BIT

MIN_OPSET = 11  # Range, NonZero, ScatterND, ScatterElements, If with outer-scope values, Mod


def _reduce(emit: Emitter, op_type: str, value: str, step: str) -> str:
    """A reduction of every element to a scalar (keepdims 0), in the form the opset takes."""
    return emit.node(op_type, [value], step, keepdims=0)


def _minimum(emit: Emitter, a: str, b: str, step: str) -> str:
    # Not Min: ONNX Runtime 1.31's INT64 Min returns 4294967288 for Min(4294967288, 255).
    return emit.node("Where", [emit.node("Less", [a, b], f"{step}_less"), a, b], step)


def _branch(name: str, nodes: list[onnx.NodeProto], out: str, data_type: int) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, data_type, None)])


class _Tensor:
    """Shapes and constants of the data tensor the gather reads."""

    def __init__(self, emit: Emitter, x: str, shape: str, size: str, axis: int, rank: int) -> None:
        self.two32 = emit.constant(2**32, np.int64, "two32")
        self.one, self.zero = emit.constant(1, np.int64, "one"), emit.constant(0, np.int64, "zero")
        self.minus_one = emit.constant([-1], np.int64, "minus_one")
        self.x, self.shape, self.size = x, shape, size
        self.outer = _reduce(emit, "ReduceProd", emit.slice(shape, 0, axis, "outer_dims"), "outer")
        self.inner = _reduce(emit, "ReduceProd", emit.slice(shape, axis + 1, rank, "inner_dims"), "inner")
        self.count = _reduce(emit, "ReduceProd", shape, "count")  # not Size: ONNX Runtime has no BFLOAT16 Size


def _words(emit: Emitter, t: _Tensor, w: str, size: str, signed: bool) -> str:
    """DirectML's coordinate of each INT64 index in ``w`` on a dimension of ``size`` (section 4.3, steps 1, 2)."""
    words = emit.node("Mod", [w, t.two32], "low_word")
    if signed:
        wrapped = emit.node("Mod", [emit.node("Add", [words, size], "plus_size"), t.two32], "wrapped")
        words = emit.node("Where", [emit.node("Less", [w, t.zero], "negative"), wrapped, words], "signed_word")
    return emit.node("Where", [emit.node("Equal", [size, t.one], "size_one"), t.zero, words], "axis_word")


def _read(emit: Emitter, t: _Tensor, p: str, words: str, s: str, data_type: int, element_size: int) -> str:
    """What DirectML reads at outer position ``p``, axis coordinate ``words`` and inner position ``s`` (broadcast
    together, then flattened; section 4.3, steps 3 to 5). The data has at least one element."""
    row = emit.node("Add", [emit.node("Mul", [p, t.size], "p_size"), words], "row")
    return _read_rows(emit, t, row, s, data_type, element_size)


def _read_rows(emit: Emitter, t: _Tensor, row: str, s: str, data_type: int, element_size: int) -> str:
    """What DirectML reads at element offset ``row * inner + s`` (broadcast together, then flattened)."""
    offsets = emit.node("Add", [emit.node("Mul", [row, t.inner], "row_inner"), s], "linear")
    offsets = emit.node("Mod", [emit.node("Reshape", [offsets, t.minus_one], "flat_linear"), t.two32], "offset")
    last = emit.node("Sub", [t.count, t.one], "last")
    flat = emit.node("Reshape", [t.x, t.minus_one], "flat")
    values = emit.node("GatherElements", [flat, _minimum(emit, offsets, last, "clamped")], "read", axis=0)
    # Past the last element: the last element again if the memory ends there, else the padding's 0.
    size_bytes = emit.constant(element_size, np.int64, "element_size")
    bytes_ = emit.node("Mul", [t.count, size_bytes], "bytes")
    odd_bytes = emit.node("Mod", [bytes_, emit.constant(4, np.int64, "four")], "odd_bytes")
    padded = emit.node("Not", [emit.node("Equal", [odd_bytes, t.zero], "whole_words")], "padded")
    zeroed = emit.node("And", [emit.node("Less", [last, offsets], "past_last"), padded], "reads_padding")
    return _overwrite(emit, values, zeroed, data_type)


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
    emit: Emitter, t: _Tensor, v: str, outside: str, index_type: int, axis: int, rank: int, index_rank: int,
    gather: bool, signed: bool, data_type: int, element_size: int,
) -> str:  # fmt: skip
    """The native op on ``v`` with its out-of-bounds values (``outside``) set to 0, and the elements they produced
    overwritten with DirectML's reading. The data has at least one element. The last node writes the output (a
    Reshape there would copy it once more), except for a Gather whose indices are not 1-D."""
    flat = gather and index_rank != 1
    v_shape = emit.node("Shape", [v], "indices_shape")
    if gather:
        outside = emit.node("Reshape", [outside, t.minus_one], "flat_outside") if flat else outside
        at = emit.node("NonZero", [outside], "outside_at")  # (1, M)
        q = emit.node("Reshape", [at, t.minus_one], "outside_positions")
    else:
        at = emit.node("NonZero", [outside], "outside_at")  # (rank, M)
        # Where each sits in the indices, flattened (ScatterElements and GatherElements beat ScatterND and GatherND).
        q = _position(emit, at, v_shape, range(rank))
    flat_v = emit.node("Reshape", [v, t.minus_one], "flat_indices")
    zero_index = helper.make_tensor("zero", TensorProto.INT32 if index_type == TensorProto.INT32 else TensorProto.INT64,
                                    [1], [0])  # fmt: skip
    zeros = emit.node("ConstantOfShape", [emit.node("Shape", [q], "outside_count")], "zero_indices", value=zero_index)
    safe = emit.node("ScatterElements", [flat_v, q, zeros], "safe_flat", axis=0)
    if not flat:
        safe = emit.node("Reshape", [safe, v_shape], "safe_indices")
    native = emit.node("Gather" if gather else "GatherElements", [t.x, safe], "native", axis=axis)

    w = emit.node("GatherElements", [flat_v, q], "outside_values", axis=0)
    if index_type == TensorProto.INT32:
        w = emit.node("Cast", [w], "outside_int64", to=TensorProto.INT64)
    words = _words(emit, t, w, t.size, signed)
    if not gather:  # single elements, at their coordinates in the indices (the data's sizes off the axis)
        p, s = _position(emit, at, t.shape, range(axis)), _position(emit, at, t.shape, range(axis + 1, rank))
        values = _read(emit, t, p, words, s, data_type, element_size)
        coordinates = emit.node("Transpose", [at], "outside_coordinates")  # (M, rank)
        return emit.node("ScatterND", [native, coordinates, values], "directml")
    # Slices: every outer and inner position of each out-of-bounds index, (P, M, S), put back along the axis.
    p = emit.node("Reshape", [emit.node("Range", [t.zero, t.outer, t.one], "outer_range"),
                              emit.constant([-1, 1, 1], np.int64, "p_shape")], "p")  # fmt: skip
    s = emit.node("Reshape", [emit.node("Range", [t.zero, t.inner, t.one], "inner_range"),
                              emit.constant([1, 1, -1], np.int64, "s_shape")], "s")  # fmt: skip
    words = emit.node("Reshape", [words, emit.constant([1, -1, 1], np.int64, "words_shape")], "words_3d")
    values = _read(emit, t, p, words, s, data_type, element_size)
    parts = [emit.slice(t.shape, 0, axis, "before"), t.minus_one, emit.slice(t.shape, axis + 1, rank, "after")]
    values = emit.node("Reshape", [values, emit.node("Concat", parts, "spread", axis=0)], "values")
    q = emit.node("Reshape", [q, emit.constant([1] * axis + [-1] + [1] * (rank - axis - 1), np.int64, "q_shape")],
                  "q")  # fmt: skip
    slots = emit.node("Expand", [q, emit.node("Shape", [values], "values_shape")], "slots")
    fixed = emit.node("ScatterElements", [native, slots, values], "directml" if not flat else "repaired", axis=axis)
    if not flat:
        return fixed
    parts[1] = v_shape
    return emit.node("Reshape", [fixed, emit.node("Concat", parts, "output_shape", axis=0)], "directml")


def _outside(emit: Emitter, v: str, limit: str, signed: bool) -> tuple[str, str]:
    """Where ``v`` is out of bounds of ``limit`` (broadcast), and whether anywhere: below -limit (below 0 for unsigned
    indices, also those that became negative as INT64) or not below limit. Where v is below the low bound it is also
    below limit: the two tests agree exactly outside."""
    low = emit.node("Neg", [limit], "low") if signed else emit.constant(0, np.int64, "low")
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
    emit: Emitter, condition: str, reading: Emitter, t: _Tensor, out_shape: str, exact: Emitter, result: str,
    native: Emitter, fast: str, data_type: int, output: str,
) -> None:  # fmt: skip
    """``output`` = ``If(condition)``: ``reading``'s nodes (``t``, ``out_shape``), then DirectML's reading (``result``
    of ``exact``, or 0s of ``out_shape`` where the data has no element); else the native op (``fast`` of ``native``)."""
    zeros = reading.fork()  # no data: every element reads 0
    value = helper.make_tensor("zero", data_type, [1], [0])
    zeros_out = zeros.node("ConstantOfShape", [out_shape], "zeros", value=value)
    read = reading.node(
        "If", [reading.node("Less", [t.count, t.one], "no_data")], "if_no_data",
        then_branch=_branch("no_data", zeros.nodes, zeros_out, data_type),
        else_branch=_branch("repair", exact.nodes, result, data_type),
    )  # fmt: skip
    emit.node(
        "If", [condition], "if_outside", output,
        then_branch=_branch("directml_reading", reading.nodes, read, data_type),
        else_branch=_branch("in_bounds", native.nodes, fast, data_type),
    )  # fmt: skip


def directml_gather(
    emit: Emitter, x: str, indices: str, index_type: int, axis: int, rank: int, index_rank: int, gather: bool,
    data_type: int, mode: str, output: str,
) -> None:  # fmt: skip
    """``output`` = Gather or GatherElements of ``x`` (of ``rank``) at ``indices`` (of ``index_rank``) along ``axis``
    as DirectML reads it (``mode`` ``directml``, or ``directml-16bit`` for 16-bit data that travels as FLOAT32)."""
    element_size = 2 if mode == DIRECTML_16BIT else helper.tensor_dtype_to_np_dtype(data_type).itemsize
    signed = index_type in (TensorProto.INT32, TensorProto.INT64)
    # The native ops take INT32 and INT64. Unsigned values from 2^63 are negative as INT64: out of bounds either way.
    v = indices if signed else emit.node("Cast", [indices], "as_int64", to=TensorProto.INT64)
    shape = emit.node("Shape", [x], "data_shape")
    size = emit.squeeze(emit.slice(shape, axis, axis + 1, "axis_size"), [0], "size")
    limit = size if index_type != TensorProto.INT32 else emit.node("Cast", [size], "size_int32", to=index_type)
    outside, condition = _outside(emit, v, limit, signed)
    reading = emit.fork()
    t = _Tensor(reading, x, shape, size, axis, rank)
    if gather:
        parts = [reading.slice(shape, 0, axis, "before"), reading.node("Shape", [v], "index_shape"),
                 reading.slice(shape, axis + 1, rank, "after")]  # fmt: skip
        out_shape = reading.node("Concat", parts, "output_shape", axis=0)
    else:
        out_shape = reading.node("Shape", [v], "output_shape")
    exact = emit.fork()
    result = _repair(exact, t, v, outside, index_type, axis, rank, index_rank, gather, signed, data_type, element_size)
    native = emit.fork()
    fast = native.node("Gather" if gather else "GatherElements", [x, v], "native", axis=axis)
    _guarded(emit, condition, reading, t, out_shape, exact, result, native, fast, data_type, output)


def directml_gather_nd(
    emit: Emitter, x: str, indices: str, index_type: int, rank: int, index_rank: int, batch: int, k: int,
    data_type: int, mode: str, output: str,
) -> None:  # fmt: skip
    """``output`` = GatherND of ``x`` (of ``rank``) at ``indices`` (of ``index_rank``, tuples of ``k``) with ``batch``
    batch dims as DirectML reads it: the native op on the tuples with the out-of-bounds ones set to 0, and the
    slices of those read at each tuple's linear position (section 4.3, in wrapping 32-bit arithmetic) and
    scattered in."""
    element_size = 2 if mode == DIRECTML_16BIT else helper.tensor_dtype_to_np_dtype(data_type).itemsize
    signed = index_type in (TensorProto.INT32, TensorProto.INT64)
    v = indices if index_type == TensorProto.INT64 else emit.node("Cast", [indices], "as_int64", to=TensorProto.INT64)
    shape = emit.node("Shape", [x], "data_shape")
    # (Not a Slice of the whole shape: ONNX Runtime would warn it cannot fold it into the branches that use it.)
    sizes = shape if (batch, k) == (0, rank) else emit.slice(shape, batch, batch + k, "tuple_sizes")
    outside, condition = _outside(emit, v, sizes, signed)
    reading = emit.fork()
    last_size = reading.squeeze(reading.slice(shape, batch + k - 1, batch + k, "last_size"), [0], "last_tuple_size")
    t = _Tensor(reading, x, shape, last_size, batch + k - 1, rank)
    trailing = reading.slice(shape, batch + k, rank, "trailing")
    parts = [reading.slice(reading.node("Shape", [v], "v_shape"), 0, -1, "tuple_dims"), trailing]
    out_shape = reading.node("Concat", parts, "output_shape", axis=0)
    fast_path = emit.fork()
    fast = fast_path.node("GatherND", [x, v], "native", **({"batch_dims": batch} if batch else {}))
    exact = emit.fork()
    if index_rank == 1:  # a single tuple (no batch dims): as a list of one, the output reshaped at the end
        v, outside = (exact.unsqueeze(value, [0], f"{step}_list") for value, step in ((v, "v"), (outside, "outside")))
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
    # Each bad tuple's linear position: its batch's, times the tuples per batch, plus its own.
    v_shape = exact.node("Shape", [v], "indices_shape")
    tuple_count = _reduce(exact, "ReduceProd", sizes, "tuple_count")
    rows = exact.node("Mod", [exact.node("Mul", [_position(exact, at, v_shape, range(batch)), tuple_count],
                                         "batch_start"), t.two32], "batch_row")  # fmt: skip
    for j in range(k):
        size = exact.squeeze(exact.slice(shape, batch + j, batch + j + 1, f"size{j}"), [0], f"tuple_size{j}")
        coordinate = exact.node("Gather", [bad, exact.constant(j, np.int64, f"k{j}")], f"coordinate{j}", axis=1)
        stride = _reduce(exact, "ReduceProd", exact.slice(shape, batch + j + 1, batch + k, f"after{j}"), f"stride{j}")
        step = exact.node("Mul", [_words(exact, t, coordinate, size, signed), stride], f"step{j}")
        rows = exact.node("Mod", [exact.node("Add", [rows, step], f"row{j}"), t.two32], f"rows{j}")
    s = exact.node("Reshape", [exact.node("Range", [t.zero, t.inner, t.one], "inner_range"),
                               exact.constant([1, -1], np.int64, "s_shape")], "s")  # fmt: skip
    values = _read_rows(exact, t, exact.unsqueeze(rows, [1], "rows_column"), s, data_type, element_size)
    slices = exact.node("Concat", [t.minus_one, trailing], "slices_shape", axis=0)
    values = exact.node("Reshape", [values, slices], "slices")
    result = exact.node("ScatterND", [native, coordinates, values], "directml" if index_rank > 1 else "repaired")
    if index_rank == 1:
        result = exact.node("Reshape", [result, out_shape], "directml")
    _guarded(emit, condition, reading, t, out_shape, exact, result, fast_path, fast, data_type, output)
