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
    two32 = emit.constant(2**32, np.int64, "two32")
    one, zero = emit.constant(1, np.int64, "one"), emit.constant(0, np.int64, "zero")
    words = emit.node("Mod", [w, two32], "low_word")
    if signed:
        wrapped = emit.node("Mod", [emit.node("Add", [words, size], "plus_size"), two32], "wrapped")
        words = emit.node("Where", [emit.node("Less", [w, zero], "negative"), wrapped, words], "signed_word")
    words = emit.node("Where", [emit.node("Equal", [size, one], "size_one"), zero, words], "axis_word")
    outer = _reduce(emit, "ReduceProd", emit.slice(shape, 0, axis, "outer_dims"), "outer")
    inner = _reduce(emit, "ReduceProd", emit.slice(shape, axis + 1, rank, "inner_dims"), "inner")
    minus_one = emit.constant([-1], np.int64, "minus_one")
    if gather:
        words = emit.node("Reshape", [words, emit.constant([1, -1, 1], np.int64, "words_shape")], "words_3d")
    else:
        as_list = [emit.unsqueeze(outer, [0], "outer_list"), minus_one, emit.unsqueeze(inner, [0], "inner_list")]
        words = emit.node("Reshape", [words, emit.node("Concat", as_list, "words_shape", axis=0)], "words_3d")
    p = emit.node("Range", [zero, outer, one], "outer_range")
    p = emit.node("Reshape", [p, emit.constant([-1, 1, 1], np.int64, "p_shape")], "p")
    s = emit.node("Range", [zero, inner, one], "inner_range")
    s = emit.node("Reshape", [s, emit.constant([1, 1, -1], np.int64, "s_shape")], "s")
    offsets = emit.node("Add", [emit.node("Mul", [p, size], "p_size"), words], "row")
    offsets = emit.node("Add", [emit.node("Mul", [offsets, inner], "row_inner"), s], "linear")
    offsets = emit.node("Mod", [offsets, two32], "offset")
    count = _reduce(emit, "ReduceProd", shape, "count")  # not Size: ONNX Runtime has no BFLOAT16 Size
    size_bytes = emit.constant(element_size, np.int64, "element_size")
    words4 = emit.node("Div", [emit.node("Add", [emit.node("Mul", [count, size_bytes], "bytes"),
                                                  emit.constant(3, np.int64, "three")], "bytes_up"),
                                emit.constant(4, np.int64, "four")], "words4")  # fmt: skip
    capacity = emit.node("Div", [emit.node("Mul", [words4, emit.constant(4, np.int64, "four_")], "padded_bytes"),
                                 size_bytes], "capacity")  # fmt: skip
    capacity = emit.node("Where", [emit.node("Less", [capacity, one], "empty"), one, capacity], "capacity_1")
    # (an empty tensor reads one 0)
    padding = emit.node("Sub", [capacity, count], "padding")
    zeros = emit.node(
        "ConstantOfShape", [emit.unsqueeze(padding, [0], "padding_list")], "zeros",
        value=helper.make_tensor("zero", data_type, [1], [0]),
    )  # fmt: skip
    flat = emit.node("Reshape", [x, minus_one], "flat")
    padded = emit.node("Concat", [flat, zeros], "padded", axis=0)
    offsets = _minimum(emit, offsets, emit.node("Sub", [capacity, one], "last"), "clamped")
    values = emit.node("Gather", [padded, offsets], "read", axis=0)
    if gather:
        parts = [emit.slice(shape, 0, axis, "before"), emit.node("Shape", [indices], "index_shape"),
                 emit.slice(shape, axis + 1, rank, "after")]  # fmt: skip
        out_shape = emit.node("Concat", parts, "output_shape", axis=0)
    else:
        out_shape = emit.node("Shape", [indices], "output_shape")
    return emit.node("Reshape", [values, out_shape], "directml")


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
