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
Runtime has got them wrong beyond the int32 range: tests/test_workarounds.py). GatherND repairs whole tuples the
same way.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from onnx import TensorProto, helper

from onnx_gather.graphs.emit import Emitter
from onnx_gather.graphs.lowering.dml_memory import (
    Data,
    NativeGather,
    Tensor,
    all_positions,
    axis_words,
    branch,
    gather_shape,
    position,
    read_at,
    read_rows,
    slice_rows,
    tuple_rows,
)


def _repair(emit: Emitter, tensor: Tensor, gather: NativeGather, v: str, outside: str) -> str:
    """The native op on ``v`` with its out-of-bounds values (``outside``) set to 0, and the elements they produced
    overwritten with DirectML's reading. The data has at least one element. The last node writes the output (a
    Reshape there would copy it once more), except for a Gather whose indices are not 1-D."""
    if gather.op_type == "GatherElements":
        return _repair_elements(emit, tensor, gather, v, outside)
    return _repair_slices(emit, tensor, gather, v, outside)


def _repair_elements(emit: Emitter, tensor: Tensor, gather: NativeGather, v: str, outside: str) -> str:
    """GatherElements: single elements, at their coordinates in the indices (the data's sizes off the axis)."""
    axis, rank = gather.axis, tensor.data.rank
    at = emit.node("NonZero", [outside], "outside_at")  # (rank, M)
    # Where each sits in the indices, flattened (ScatterElements and GatherElements beat ScatterND and GatherND).
    v_shape = emit.node("Shape", [v], "indices_shape")
    positions = position(emit, at, v_shape, range(rank))
    flat_v = emit.node("Reshape", [v, tensor.minus_one], "flat_indices")
    # Indices (not data: exact) with the out-of-bounds ones 0. GatherElements' indices are as many as its output: a
    # ScatterElements of the few zeros beats a Where over them all (3x on 4 million indices).
    zero_type = TensorProto.INT32 if gather.index_type == TensorProto.INT32 else TensorProto.INT64
    zero_index = helper.make_tensor("zero", zero_type, [1], [0])
    zeros = emit.node("ConstantOfShape", [emit.node("Shape", [positions], "outside_count")], "zeros", value=zero_index)
    safe_flat = emit.node("ScatterElements", [flat_v, positions, zeros], "safe_flat", axis=0)
    safe = emit.node("Reshape", [safe_flat, v_shape], "safe")
    native = emit.node(gather.op_type, [tensor.x, safe], "native", axis=axis)
    words = _outside_words(emit, tensor, gather, flat_v, positions)
    shape = tensor.data.sizes(emit, 0, rank, "data_sizes")
    outer, inner = position(emit, at, shape, range(axis)), position(emit, at, shape, range(axis + 1, rank))
    values = read_at(emit, tensor, gather, outer, words, inner)
    coordinates = emit.node("Transpose", [at], "outside_coordinates")  # (M, rank)
    return emit.node("ScatterND", [native, coordinates, values], "directml")


def _repair_slices(emit: Emitter, tensor: Tensor, gather: NativeGather, v: str, outside: str) -> str:
    """Gather: every outer and inner position of each out-of-bounds index, (P, M, S), put back along the axis. The
    indices are flat where they are not 1-D, and the slices put back in their form."""
    axis, rank = gather.axis, tensor.data.rank
    flat = gather.index_rank != 1
    outside_list = emit.node("Reshape", [outside, tensor.minus_one], "flat_outside") if flat else outside
    at = emit.node("NonZero", [outside_list], "outside_at")  # (1, M)
    positions = emit.node("Reshape", [at, tensor.minus_one], "outside_positions")
    flat_v = emit.node("Reshape", [v, tensor.minus_one], "flat_indices") if flat else v
    # Indices (not data: exact) with the out-of-bounds ones 0.
    zero_index = emit.constant(0, np.int32 if gather.index_type == TensorProto.INT32 else np.int64, "zero_index")
    safe = emit.node("Where", [outside_list, zero_index, flat_v], "safe")
    native = emit.node(gather.op_type, [tensor.x, safe], "native", axis=axis)
    words = _outside_words(emit, tensor, gather, flat_v, positions)
    outer = all_positions(emit, tensor, tensor.data.known(0, axis), lambda: tensor.outer, [-1, 1, 1], "p")
    inner = all_positions(emit, tensor, tensor.data.known(axis + 1, rank), lambda: tensor.inner, [1, 1, -1], "s")
    words = emit.node("Reshape", [words, emit.constant([1, -1, 1], np.int64, "words_shape")], "words_3d")
    values = read_at(emit, tensor, gather, outer, words, inner)
    values = emit.node("Reshape", [values, _spread(emit, tensor, axis)], "values")
    along_axis = emit.constant([1] * axis + [-1] + [1] * (rank - axis - 1), np.int64, "positions_shape")
    positions = emit.node("Reshape", [positions, along_axis], "positions_along_axis")
    slots = emit.node("Expand", [positions, emit.node("Shape", [values], "values_shape")], "slots")
    fixed = emit.node("ScatterElements", [native, slots, values], "directml" if not flat else "repaired", axis=axis)
    if not flat:
        return fixed
    v_shape = emit.node("Shape", [v], "indices_shape")
    return emit.node("Reshape", [fixed, gather_shape(emit, tensor.data, v_shape, axis)], "directml")


def _outside_words(emit: Emitter, tensor: Tensor, gather: NativeGather, flat_v: str, positions: str) -> str:
    """The axis words (``axis_words``) DirectML reads for each out-of-bounds index, at ``positions`` of the flat
    indices."""
    index_values = emit.node("GatherElements", [flat_v, positions], "outside_values", axis=0)
    if gather.index_type == TensorProto.INT32:
        index_values = emit.node("Cast", [index_values], "outside_int64", to=TensorProto.INT64)
    return axis_words(emit, tensor, index_values, (tensor.size, tensor.known_size), gather.negative_reads)


def _spread(emit: Emitter, tensor: Tensor, axis: int) -> str:
    """The shape that spreads read slices along the axis: the data's sizes before and after it, -1 on it."""
    rank = tensor.data.rank
    before, after = tensor.data.known(0, axis), tensor.data.known(axis + 1, rank)
    if before is not None and after is not None:
        return emit.constant([*before, -1, *after], np.int64, "spread")
    parts = [
        tensor.data.sizes(emit, 0, axis, "before"),
        tensor.minus_one,
        tensor.data.sizes(emit, axis + 1, rank, "after"),
    ]
    return emit.node("Concat", parts, "spread", axis=0)


def outside_bounds(
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


@dataclass(frozen=True)
class _Branches:
    """What the If guarding a DirectML reading chooses between."""

    reading: Emitter  # the nodes every reading starts with (``tensor``'s sizes and constants)
    tensor: Tensor
    out_shape: Callable[[Emitter], str]  # the output's shape, for the 0s of data with no element
    repair: Callable[[Emitter], str]  # DirectML's reading of the data at the indices
    native: Emitter  # the native op's branch, where every index is in bounds
    fast: str  # its output


def _guarded(emit: Emitter, gather: NativeGather, condition: str, branches: _Branches) -> None:
    """``gather.output`` = ``If(condition)``: the reading's nodes, then DirectML's reading (what ``repair`` makes,
    or 0s of ``out_shape`` where the data has no element); else the native op. Where the model states the data's
    element count, only the reading that applies is made (no second If)."""
    reading, tensor, data_type = branches.reading, branches.tensor, gather.data_type
    value = helper.make_tensor("zero", data_type, [1], [0])
    if tensor.known_count != 0:
        exact = reading.fork()
        result = branches.repair(exact)
    if tensor.known_count is None:  # no data: every element reads 0
        zeros = reading.fork()
        zeros_out = zeros.node("ConstantOfShape", [branches.out_shape(zeros)], "zeros", value=value)
        read = reading.node(
            "If",
            [reading.node("Less", [tensor.count, tensor.one], "no_data")],
            "if_no_data",
            then_branch=branch("no_data", zeros.nodes, zeros_out, data_type),
            else_branch=branch("repair", exact.nodes, result, data_type),
        )
        then_nodes = reading.nodes
    elif tensor.known_count == 0:
        read = reading.node("ConstantOfShape", [branches.out_shape(reading)], "zeros", value=value)
        then_nodes = reading.nodes
    else:
        read, then_nodes = result, reading.nodes + exact.nodes
    emit.node(
        "If",
        [condition],
        "if_outside",
        gather.output,
        then_branch=branch("directml_reading", then_nodes, read, data_type),
        else_branch=branch("in_bounds", branches.native.nodes, branches.fast, data_type),
    )


def _index_dtype(index_type: int) -> type:
    return np.int32 if index_type == TensorProto.INT32 else np.int64


def directml_reading(emit: Emitter, gather: NativeGather) -> None:
    """``gather.output`` = the gather as DirectML reads it: the native op where every index is in bounds, else the
    reading of section 4.3 (Gather and GatherElements one index at a time, GatherND one tuple at a time)."""
    if gather.op_type == "GatherND":
        _directml_gather_nd(emit, gather)
    else:
        _directml_gather(emit, gather)


def _directml_gather(emit: Emitter, gather: NativeGather) -> None:
    """Gather or GatherElements of the data at the indices along ``gather.axis`` as DirectML reads it."""
    index_type, axis = gather.index_type, gather.axis
    # The native ops take INT32 and INT64. Unsigned values from 2^63 are negative as INT64: out of bounds either way.
    v = gather.indices if gather.signed else emit.node("Cast", [gather.indices], "as_int64", to=TensorProto.INT64)
    data = Data(emit, gather.data, gather.dims)
    size = data.size(emit, axis, "size")
    limit = size[0]
    if index_type == TensorProto.INT32:
        known = size[1]
        limit = (
            emit.constant(known, np.int32, "size_int32")
            if known is not None
            else (emit.node("Cast", [limit], "size_int32", to=index_type))
        )
    outside, condition = outside_bounds(emit, v, limit, size[1], _index_dtype(index_type), gather.signed)
    reading = emit.fork()
    tensor = Tensor(reading, data, axis, size[0])

    def out_shape(branch: Emitter) -> str:
        v_shape = branch.node("Shape", [v], "index_shape")
        return gather_shape(branch, data, v_shape, axis) if gather.op_type == "Gather" else v_shape

    native = emit.fork()
    fast = native.node(gather.op_type, [gather.data, v], "native", axis=axis)
    repair = functools.partial(_repair, tensor=tensor, gather=gather, v=v, outside=outside)
    _guarded(emit, gather, condition, _Branches(reading, tensor, out_shape, repair, native, fast))


def _directml_gather_nd(emit: Emitter, gather: NativeGather) -> None:
    """GatherND of the data at the index tuples with ``gather.batch`` batch dims as DirectML reads it: the native op
    on the tuples with the out-of-bounds ones set to 0, and the slices of those read at each tuple's linear position
    (section 4.3, in wrapping 32-bit arithmetic) and scattered in."""
    x, index_type, batch, k = gather.data, gather.index_type, gather.batch, gather.tuple_length
    indices = gather.indices
    v = indices if index_type == TensorProto.INT64 else emit.node("Cast", [indices], "as_int64", to=TensorProto.INT64)
    data = Data(emit, x, gather.dims)
    rank = data.rank
    sizes = data.sizes(emit, batch, batch + k, "tuple_sizes")
    outside_at, condition = outside_bounds(emit, v, sizes, data.known(batch, batch + k), np.int64, gather.signed)
    reading = emit.fork()
    tensor = Tensor(reading, data, batch + k - 1)

    tuples = v

    def out_shape(branch: Emitter) -> str:
        tuple_dims = branch.slice(branch.node("Shape", [tuples], "v_shape"), 0, -1, "tuple_dims")
        return branch.node(
            "Concat", [tuple_dims, data.sizes(branch, batch + k, rank, "trailing")], "output_shape", axis=0
        )

    fast_path = emit.fork()
    fast = fast_path.node("GatherND", [x, v], "native", **({"batch_dims": batch} if batch else {}))

    def repair(exact: Emitter) -> str:
        v, outside = tuples, outside_at
        # The tuple sizes again, made in here: before opset 15 the ones outside are a Slice of the data's shape, and a
        # subgraph that sees both makes ONNX Runtime warn when its optimizer checks whether it could drop the Slice.
        sizes = data.sizes(exact, batch, batch + k, "tuple_sizes")
        if gather.index_rank == 1:  # a single tuple (no batch dims): as a list of one, the output reshaped at the end
            v, outside = exact.unsqueeze(v, [0], "v_list"), exact.unsqueeze(outside, [0], "outside_list")
        # Which tuples have a coordinate outside, where they are, and what they hold.
        tuple_outside = functools.reduce(
            lambda a, b: exact.node("Or", [a, b], "tuple_outside"),
            (
                exact.node("Gather", [outside, exact.constant(j, np.int64, f"j{j}")], f"outside{j}", axis=-1)
                for j in range(k)
            ),
        )
        at = exact.node("NonZero", [tuple_outside], "outside_at")  # (index rank - 1, M)
        coordinates = exact.node("Transpose", [at], "outside_coordinates")  # (M, index rank - 1)
        bad = exact.node("GatherND", [v, coordinates], "outside_tuples")  # (M, k)
        safe = exact.node(
            "Where", [exact.unsqueeze(tuple_outside, [-1], "outside_column"), tensor.zero, v], "safe_tuples"
        )
        native = exact.node("GatherND", [x, safe], "native", **({"batch_dims": batch} if batch else {}))
        # Each bad tuple's linear position, in wrapping 32-bit arithmetic: its batch's position, then each coordinate
        # (Horner's rule: ((b * size0 + word0) * size1 + word1) ..., each step taken mod 2^32).
        words = axis_words(exact, tensor, bad, (sizes, data.known(batch, batch + k)), gather.negative_reads)  # (M, k)
        rows = None if batch == 0 else position(exact, at, exact.node("Shape", [v], "indices_shape"), range(batch))
        rows = tuple_rows(exact, tensor, words, sizes, range(batch, batch + k), rows)
        values = read_rows(exact, tensor, gather, *slice_rows(exact, tensor, rows, batch + k))
        trailing = data.sizes(exact, batch + k, rank, "trailing")
        slices = exact.node("Concat", [tensor.minus_one, trailing], "slices_shape", axis=0)
        values = exact.node("Reshape", [values, slices], "slices")
        step = "directml" if gather.index_rank > 1 else "repaired"
        result = exact.node("ScatterND", [native, coordinates, values], step)
        if gather.index_rank == 1:
            result = exact.node("Reshape", [result, out_shape(exact)], "directml")
        return result

    _guarded(emit, gather, condition, _Branches(reading, tensor, out_shape, repair, fast_path, fast))
