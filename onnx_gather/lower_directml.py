"""``out_of_bounds=directml`` in standard ONNX: what real DirectML reads (docs/semantics.md, section 4.3).

An ``If`` on "is any index out of bounds?" keeps the native op for the common case. Its other branch computes
DirectML's reading exactly: the axis coordinate from the index's low 32 bits (plus the axis size if the whole value
is negative; 0 on an axis of size 1), the linear offset in wrapping 32-bit arithmetic, clamped to the tensor's
memory rounded up to 4 bytes, whose padding reads 0. Offsets stay below 2^63 in INT64 for tensors of fewer than
2^31 elements, DirectML's own limit.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnx_gather.graph import Emitter
from onnx_gather.semantics import DIRECTML_16BIT

MIN_OPSET = 11  # Range, If with outer-scope values, Mod


def _reduce(emit: Emitter, op_type: str, value: str, step: str) -> str:
    """A reduction of every element to a scalar (keepdims 0), in the form the opset takes."""
    return emit.node(op_type, [value], step, keepdims=0)


def _minimum(emit: Emitter, a: str, b: str, step: str) -> str:
    # Not Min: ONNX Runtime 1.31's INT64 Min returns 4294967288 for Min(4294967288, 255).
    return emit.node("Where", [emit.node("Less", [a, b], f"{step}_less"), a, b], step)


def _exact(
    emit: Emitter, x: str, w: str, shape: str, size: str, axis: int, rank: int, gather: bool, signed: bool,
    data_type: int, element_size: int, indices: str,
) -> str:  # fmt: skip
    """The nodes of DirectML's reading, appended to ``emit``; returns the output (the standard op's shape)."""
    c = _Constants(emit)
    words = emit.node("Mod", [w, c.two32], "low_word")
    if signed:
        wrapped = emit.node("Mod", [emit.node("Add", [words, size], "plus_size"), c.two32], "wrapped")
        words = emit.node("Where", [emit.node("Less", [w, c.zero], "negative"), wrapped, words], "signed_word")
    words = emit.node("Where", [emit.node("Equal", [size, c.one], "size_one"), c.zero, words], "axis_word")
    outer = _reduce(emit, "ReduceProd", emit.slice(shape, 0, axis, "outer_dims"), "outer")
    inner = _reduce(emit, "ReduceProd", emit.slice(shape, axis + 1, rank, "inner_dims"), "inner")
    inner_list = emit.unsqueeze(inner, [0], "inner_list")
    if gather:
        words = emit.node("Reshape", [words, emit.constant([1, -1, 1], np.int64, "words_shape")], "words_3d")
    else:
        as_list = [emit.unsqueeze(outer, [0], "outer_list"), c.minus_one, inner_list]
        words = emit.node("Reshape", [words, emit.node("Concat", as_list, "words_shape", axis=0)], "words_3d")
    p = emit.node("Range", [c.zero, outer, c.one], "outer_range")
    p = emit.node("Reshape", [p, emit.constant([-1, 1, 1], np.int64, "p_shape")], "p")
    row = emit.node("Add", [emit.node("Mul", [p, size], "p_size"), words], "row")  # (P, K, 1) or (P, J, S)
    count = _reduce(emit, "ReduceProd", shape, "count")  # not Size: ONNX Runtime has no BFLOAT16 Size
    size_bytes = emit.constant(element_size, np.int64, "element_size")
    words4 = emit.node("Div", [emit.node("Add", [emit.node("Mul", [count, size_bytes], "bytes"),
                                                  emit.constant(3, np.int64, "three")], "bytes_up"),
                                emit.constant(4, np.int64, "four")], "words4")  # fmt: skip
    capacity = emit.node("Div", [emit.node("Mul", [words4, emit.constant(4, np.int64, "four_")], "padded_bytes"),
                                 size_bytes], "capacity")  # fmt: skip
    # An empty tensor reads one 0.
    capacity = emit.node("Where", [emit.node("Less", [capacity, c.one], "empty"), c.one, capacity], "capacity_1")
    padding = emit.node("Sub", [capacity, count], "padding")
    zeros = emit.node(
        "ConstantOfShape", [emit.unsqueeze(padding, [0], "padding_list")], "zeros",
        value=helper.make_tensor("zero", data_type, [1], [0]),
    )  # fmt: skip
    last = emit.node("Sub", [capacity, c.one], "last")
    if gather:
        parts = [emit.slice(shape, 0, axis, "before"), emit.node("Shape", [indices], "index_shape"),
                 emit.slice(shape, axis + 1, rank, "after")]  # fmt: skip
        out_shape = emit.node("Concat", parts, "output_shape", axis=0)
    else:
        out_shape = emit.node("Shape", [indices], "output_shape")
    elementwise = emit.fork() if gather else emit
    s = elementwise.node("Range", [c.zero, inner, c.one], "inner_range")
    s = elementwise.node("Reshape", [s, elementwise.constant([1, 1, -1], np.int64, "s_shape")], "s")
    offsets = elementwise.node("Add", [elementwise.node("Mul", [row, inner], "row_inner"), s], "linear")
    offsets = elementwise.node("Mod", [offsets, c.two32], "offset")
    flat = elementwise.node("Reshape", [x, c.minus_one], "flat")
    padded = elementwise.node("Concat", [flat, zeros], "padded", axis=0)
    offsets = _minimum(elementwise, offsets, last, "clamped")
    values = elementwise.node("Gather", [padded, offsets], "read", axis=0)
    if gather:
        values = _rows(emit, elementwise, x, row, inner, inner_list, count, padding, zeros, last, values, data_type)
    return emit.node("Reshape", [values, out_shape], "directml")


class _Constants:
    def __init__(self, emit: Emitter) -> None:
        self.two32 = emit.constant(2**32, np.int64, "two32")
        self.one, self.zero = emit.constant(1, np.int64, "one"), emit.constant(0, np.int64, "zero")
        self.minus_one = emit.constant([-1], np.int64, "minus_one")


def _rows(
    emit: Emitter, elementwise: Emitter, x: str, row: str, inner: str, inner_list: str, count: str, padding: str,
    zeros: str, last: str, values: str, data_type: int,
) -> str:  # fmt: skip
    """For DML_GATHER: whole rows where every output row is a row of the data or lies past the end (the common case:
    a row gather, about twice the native op), else the element-by-element reading ``values`` of ``elementwise``."""
    c = _Constants(emit)
    inner_safe = emit.node("Where", [emit.node("Less", [inner, c.one], "no_inner"), c.one, inner], "inner_safe")
    start = emit.node("Mod", [emit.node("Mul", [row, inner], "row_start"), c.two32], "start")
    aligned = emit.node("Equal", [emit.node("Mod", [start, inner_safe], "start_in_row"), c.zero], "aligned")
    last_start = emit.node("Sub", [count, inner], "last_start")
    fits = emit.node("Not", [emit.node("Less", [last_start, start], "over")], "fits")
    regular = emit.node("And", [aligned, fits], "regular")
    past = emit.node("Not", [emit.node("Less", [start, last], "before_last")], "past")
    irregular = emit.node("And", [emit.node("Not", [regular], "not_regular"), emit.node("Not", [past], "not_past")],
                          "irregular")  # fmt: skip
    irregulars = _reduce(emit, "ReduceSum", emit.node("Cast", [irregular], "irregular_count", to=TensorProto.INT64),
                         "irregulars")  # fmt: skip
    condition = emit.node("Or", [emit.node("Greater", [irregulars, c.zero], "any_irregular"),
                                 emit.node("Less", [count, c.one], "no_data")], "element_by_element")  # fmt: skip
    rows = emit.fork()
    flat = rows.node("Reshape", [x, c.minus_one], "flat")
    end = rows.unsqueeze(count, [0], "end")
    tail = rows.node("Concat", [rows.node("Slice", [flat, rows.node("Sub", [end, c.one], "tail_start"), end], "tail"),
                                zeros], "tail_padded", axis=0)  # fmt: skip
    # A row of the element at capacity - 1 (or the 0 past the end): tail[padding], gathered (no Expand: it has no
    # BFLOAT16 kernel in ONNX Runtime).
    one_list = rows.constant([1], np.int64, "one_list")
    shape_2d = rows.node("Concat", [one_list, inner_list], "row_shape", axis=0)
    cell = rows.node("Reshape", [padding, rows.constant([1, 1], np.int64, "cell")], "cell_index")
    extra = rows.node("Gather", [tail, rows.node("Expand", [cell, shape_2d], "extra_index")], "extra_row", axis=0)
    rows_shape = rows.node("Concat", [c.minus_one, inner_list], "rows_shape", axis=0)
    table = rows.node("Concat", [rows.node("Reshape", [x, rows_shape], "data_rows"), extra], "table", axis=0)
    ids = rows.node("Where", [regular, rows.node("Div", [start, inner_safe], "row_id"),
                              rows.node("Div", [count, inner_safe], "extra_id")], "ids")  # fmt: skip
    gathered = rows.node("Gather", [table, ids], "rows", axis=0)

    def branch(name: str, nodes: list[onnx.NodeProto], out: str) -> onnx.GraphProto:
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, data_type, None)])

    return emit.node(
        "If",
        [condition],
        "if_rows",
        then_branch=branch("element_by_element", elementwise.nodes, values),
        else_branch=branch("whole_rows", rows.nodes, gathered),
    )


def directml_gather(
    emit: Emitter, x: str, indices: str, index_type: int, axis: int, rank: int, gather: bool, data_type: int,
    mode: str, output: str,
) -> None:  # fmt: skip
    """``output`` = Gather or GatherElements of ``x`` at ``indices`` along ``axis`` as DirectML reads it (``mode``
    ``directml``, or ``directml-16bit`` for 16-bit data that travels as FLOAT32)."""
    element_size = 2 if mode == DIRECTML_16BIT else helper.tensor_dtype_to_np_dtype(data_type).itemsize
    signed = index_type in (TensorProto.INT32, TensorProto.INT64)
    # The native ops take INT32 and INT64. Unsigned values from 2^63 are negative as INT64: out of bounds either way.
    v = indices if signed else emit.node("Cast", [indices], "as_int64", to=TensorProto.INT64)
    shape = emit.node("Shape", [x], "data_shape")
    size = emit.squeeze(emit.slice(shape, axis, axis + 1, "axis_size"), [0], "size")
    # The lowest and highest index, through DOUBLE: ONNX Runtime's integer ReduceMin and ReduceMax are several times
    # slower than its Cast and floating-point ones. DOUBLE keeps the order of every value against sizes below 2^31.
    # Over an empty tensor the lowest is the largest value and the highest the smallest: the native op runs.
    wide = emit.node("Cast", [v], "as_double", to=TensorProto.DOUBLE)
    lowest, highest = _reduce(emit, "ReduceMin", wide, "lowest"), _reduce(emit, "ReduceMax", wide, "highest")
    size_double = emit.node("Cast", [size], "size_double", to=TensorProto.DOUBLE)
    low = emit.node("Neg", [size_double], "low") if signed else emit.constant(0.0, np.float64, "low")
    below = emit.node("Less", [lowest, low], "below")
    above = emit.node("Not", [emit.node("Less", [highest, size_double], "inside")], "above")
    condition = emit.node("Or", [below, above], "any_outside")

    exact = emit.fork()
    w = v if index_type != TensorProto.INT32 else exact.node("Cast", [v], "as_int64", to=TensorProto.INT64)
    result = _exact(exact, x, w, shape, size, axis, rank, gather, signed, data_type, element_size, indices)
    native = emit.fork()
    fast = native.node("Gather" if gather else "GatherElements", [x, v], "native", axis=axis)

    def branch(name: str, nodes: list[onnx.NodeProto], out: str) -> onnx.GraphProto:
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, data_type, None)])

    emit.node(
        "If", [condition], "if_outside", output,
        then_branch=branch("directml_reading", exact.nodes, result),
        else_branch=branch("in_bounds", native.nodes, fast),
    )  # fmt: skip
