"""DmlScatterElements and DmlScatterNd in standard ONNX (docs/semantics.md section 10), exact in every mode.

Each update's element offset is computed as DirectML computes it, with the gathers' arithmetic (``dml_memory``):
the index's 32-bit word (``axis_words``: its low 32 bits, plus the dimension's size where its top bit is set, 0 on
a dimension of size 1), times the output's row-major strides, summed in wrapping 32-bit arithmetic
(``linear_offsets``, and ``tuple_rows`` for ScatterND's tuples). Then the output, flattened, takes every update at its
offset in one ``ScatterElements`` along axis 0, and is reshaped back:

* ``directml``: a write at an offset not below the output's element count is dropped (``Compress``). The 8- and
  16-bit tensors' padding bytes, which DirectML may write, are not part of the tensor.
* ``clamp``: the indices are clamped into their dimensions first (``native.fix_indices``, ``native.fix_tuples``).
* ``error``: where any index lies outside ``[-size, size)`` (``[0, size)`` unsigned), every offset is moved past the
  end, so that ``ScatterElements`` fails as ONNX Runtime's own scatters do.

With ``duplicates=error`` (the DML nodes' default: which of several different writes DirectML keeps is a race), the
flat output read back at every update's offset must hold that update (the same value: -0 and +0 apart, NaN meeting
NaN whatever its payload, where ``core.scatter`` compares bytes); where one does not, another update of a different
value followed it, and every offset is moved past the end, so that a second ``ScatterElements`` fails. With
``duplicates=last``, of several updates of one element the last stays, as in ``core.scatter``: ONNX Runtime's CPU
``ScatterElements``
writes its updates in order (tests/test_scatter_lowering.py pins it), where its ``ScatterND`` splits them between
threads (2^20 updates of four elements on two threads kept the 393,212th to 393,215th, not the last).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from onnx import TensorProto, helper

from onnx_gather.graphs.emit import Emitter
from onnx_gather.graphs.lowering.directml_reading import outside_bounds
from onnx_gather.graphs.lowering.dml_memory import (
    Data,
    Tensor,
    all_positions,
    axis_rows,
    axis_words,
    linear_offsets,
    slice_rows,
    tuple_rows,
)
from onnx_gather.graphs.lowering.native import fix_indices, fix_tuples


@dataclass(frozen=True)
class NativeScatter:
    """One DML scatter as the lowering writes it: what it takes and writes, and where the indices point."""

    op_type: str  # DmlScatterElements or DmlScatterNd
    data: str
    dims: tuple[int | str | None, ...]  # the data's
    indices: str
    index_type: int
    updates: str
    mode: str  # directml, clamp or error
    output: str
    first: int  # ScatterElements: the axis; ScatterND: the first dim the tuples address (the data's leading ones)
    tuple_length: int = 0  # ScatterND's coordinates per index tuple
    duplicates: str = "last"  # or error: updates of different values to one element fail
    data_type: int = TensorProto.FLOAT  # the data's element type, as the DML node takes it
    may_be_empty: bool = True  # ScatterND: whether the indices may hold no tuple (a dim not known to be above 0)


def lower_scatter(emit: Emitter, scatter: NativeScatter) -> None:
    """``scatter.output`` = the DML scatter's output, in standard nodes."""
    data = Data(emit, scatter.data, scatter.dims)
    nd = scatter.op_type == "DmlScatterNd"
    tensor = Tensor(emit, data, scatter.first + scatter.tuple_length - 1 if nd else scatter.first)
    offsets, outside = (_nd_offsets if nd else _element_offsets)(emit, tensor, scatter)
    known = tensor.known_count
    count = emit.constant(known, np.int64, "count") if known is not None else tensor.count
    values = emit.node("Reshape", [scatter.updates, tensor.minus_one], "flat_updates")
    if scatter.mode == "directml":  # a write past the output is dropped
        inside = emit.node("Less", [offsets, count], "inside")
        offsets = emit.node("Compress", [offsets, inside], "kept_offsets", axis=0)
        values = emit.node("Compress", [values, inside], "kept_updates", axis=0)
    elif scatter.mode == "error":  # any index outside: every offset past the end, which ScatterElements refuses
        past = emit.node("Mul", [emit.node("Cast", [outside], "past", to=TensorProto.INT64), count], "past_end")
        offsets = emit.node("Add", [offsets, past], "checked_offsets")
    flat = emit.node("Reshape", [scatter.data, tensor.minus_one], "flat")
    written = emit.node("ScatterElements", [flat, offsets, values], "scatter", axis=0)
    if scatter.duplicates == "error":  # an update its element does not hold: another of a different value followed
        kept = emit.node("GatherElements", [written, offsets], "kept", axis=0)
        differ = emit.node("Not", [_same(emit, kept, values, scatter.data_type)], "overwritten")
        count_differ = emit.node(
            "ReduceSum",
            [emit.node("Cast", [differ], "overwritten_int", to=TensorProto.INT64)],
            "overwritten_count",
            keepdims=0,
        )
        any_differ = emit.node(
            "Cast", [emit.node("Cast", [count_differ], "any", to=TensorProto.BOOL)], "any_int", to=TensorProto.INT64
        )
        past = emit.node("Mul", [any_differ, count], "race_past_end")
        offsets = emit.node("Add", [offsets, past], "race_checked_offsets")
        written = emit.node("ScatterElements", [written, offsets, values], "race_checked", axis=0)
    if (
        nd and scatter.may_be_empty
    ):  # no tuple: the provider leaves the output unwritten, zeros as core.scatter gives them (bits moved only)
        tuples = emit.node("Size", [scatter.indices], "tuples_size")
        none = emit.node(
            "Cast",
            [emit.node("Equal", [tuples, emit.constant(0, np.int64, "no")], "no_tuples")],
            "no_tuples_int",
            to=TensorProto.INT64,
        )
        zero = helper.make_tensor("zero", scatter.data_type, [1], [0])
        zeros = emit.node("ConstantOfShape", [emit.node("Shape", [flat], "flat_shape")], "zeros", value=zero)
        length = emit.unsqueeze(count, [0], "length")
        start = emit.node("Mul", [emit.unsqueeze(none, [0], "no_tuples_1d"), length], "start")
        both = emit.node("Concat", [written, zeros], "written_or_zeros", axis=0)
        ends = emit.node("Add", [start, length], "end")
        written = emit.node("Slice", [both, start, ends, emit.constant([0], np.int64, "axis_0")], "unwritten")
    emit.node("Reshape", [written, data.sizes(emit, 0, data.rank, "shape")], "output", scatter.output)


_FLOATS = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16)


def _same(emit: Emitter, a: str, b: str, data_type: int) -> str:
    """Where ``a`` and ``b`` hold the same value: equal, -0 apart from +0, NaN meeting NaN (payloads aside)."""
    equal = emit.node("Equal", [a, b], "equal")
    if data_type not in _FLOATS:
        return equal
    dtype = {TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64, TensorProto.FLOAT16: np.float16}[data_type]
    one = emit.constant(1, dtype, "one")
    signs = emit.node(
        "Equal", [emit.node("Div", [one, a], "a_inverse"), emit.node("Div", [one, b], "b_inverse")], "signs"
    )
    nonzero = emit.node("Not", [emit.node("Equal", [a, emit.constant(0, dtype, "zero")], "a_zero")], "a_nonzero")
    same = emit.node("And", [equal, emit.node("Or", [nonzero, signs], "sign_kept")], "same_value")
    nans = emit.node("And", [emit.node("IsNaN", [a], "a_nan"), emit.node("IsNaN", [b], "b_nan")], "both_nan")
    return emit.node("Or", [same, nans], "same")


def _as_int64(emit: Emitter, indices: str, index_type: int) -> str:
    if index_type == TensorProto.INT64:
        return indices
    return emit.node("Cast", [indices], "as_int64", to=TensorProto.INT64)


def _element_offsets(emit: Emitter, tensor: Tensor, scatter: NativeScatter) -> tuple[str, str | None]:
    """DML_SCATTER: each update's offset, ``(p * size + word) * inner + s`` mod 2^32 with p and s its positions
    before and after the axis (the data's sizes there: ``tensor`` is along the axis), in the updates' order; and for
    ``error`` whether any index is outside."""
    axis, index_type, data = scatter.first, scatter.index_type, tensor.data
    size = (tensor.size, tensor.known_size)
    v, outside = _as_int64(emit, scatter.indices, index_type), None
    signed = index_type in (TensorProto.INT32, TensorProto.INT64)
    if scatter.mode == "error":
        outside = outside_bounds(emit, v, size[0], size[1], np.int64, signed)[1]
    elif scatter.mode == "clamp":
        clamped = fix_indices(emit, scatter.data, scatter.indices, index_type, axis, size[1], "clamp")[0]
        v = _as_int64(emit, clamped, TensorProto.INT32 if index_type == TensorProto.INT32 else TensorProto.INT64)
    words = axis_words(emit, tensor, v, size, index_type != TensorProto.UINT32)
    before, after = data.known(0, axis), data.known(axis + 1, data.rank)
    if before is not None and after is not None:
        blocks = emit.constant([math.prod(before), -1, math.prod(after)], np.int64, "blocks")
    else:
        parts = [emit.unsqueeze(tensor.outer, [0], "outer_1d"), tensor.minus_one]
        blocks = emit.node("Concat", [*parts, emit.unsqueeze(tensor.inner, [0], "inner_1d")], "blocks", axis=0)
    words = emit.node("Reshape", [words, blocks], "words_3d")
    outer = all_positions(emit, tensor, before, lambda: tensor.outer, [-1, 1, 1], "p")
    inner = all_positions(emit, tensor, after, lambda: tensor.inner, [1, 1, -1], "s")
    return linear_offsets(emit, tensor, axis_rows(emit, tensor, outer, words), inner), outside


def _nd_offsets(emit: Emitter, tensor: Tensor, scatter: NativeScatter) -> tuple[str, str | None]:
    """DML_SCATTER_ND: each update's offset, the row of its tuple (``tuple_rows``) times the slice's size plus its
    place in the slice, mod 2^32, in the updates' order (``tensor`` is along the tuples' last dim); as
    ``_element_offsets``."""
    first, k, index_type, data = scatter.first, scatter.tuple_length, scatter.index_type, tensor.data
    sizes = data.sizes(emit, first, first + k, "tuple_sizes")
    indices, outside = scatter.indices, None
    if scatter.mode == "clamp":
        v = fix_tuples(emit, scatter.data, indices, index_type, first, k, "clamp")[0]
    else:
        v = _as_int64(emit, indices, index_type)
    v = emit.node("Reshape", [v, emit.constant([-1, k], np.int64, "tuples_shape")], "tuples")
    if scatter.mode == "error":
        signed = index_type in (TensorProto.INT32, TensorProto.INT64)
        outside = outside_bounds(emit, v, sizes, data.known(first, first + k), np.int64, signed)[1]
    words = axis_words(emit, tensor, v, (sizes, data.known(first, first + k)), index_type != TensorProto.UINT32)
    rows = tuple_rows(emit, tensor, words, sizes, range(first, first + k))
    return linear_offsets(emit, tensor, *slice_rows(emit, tensor, rows, first + k)), outside
