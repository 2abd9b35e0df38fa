"""Indices for ONNX's native gathers with DML's meaning under the out-of-bounds modes ``error``, ``clamp`` and
``zero``: signed, clamped or masked as the mode says, and the mask that zeroes the results of indices outside; and
when no fixing is needed (constant indices in bounds, coordinates of a mask of the data's own dims)."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
from onnx import TensorProto, helper

from onnx_gather.core import contract
from onnx_gather.graphs.emit import Emitter
from onnx_gather.graphs.plumbing import DefUse
from onnx_gather.graphs.types import ValueType


def zero_where(emit: Emitter, mask: str, result: str, data_type: int, output: str | None) -> str:
    """``result`` with 0 where ``mask`` is false, through a type ONNX Runtime's Where has a kernel for."""
    where_type = contract.WHERE_CARRIERS.get(data_type, data_type)
    if where_type != data_type:
        result = emit.node("Cast", [result], "carry_for_where", to=where_type)
    zero = emit.constant(0, helper.tensor_dtype_to_np_dtype(where_type), "zero")
    result = emit.node("Where", [mask, result, zero], "zero_out_of_bounds", output if where_type == data_type else None)
    if where_type != data_type:
        result = emit.node("Cast", [result], "carry_back", output, to=data_type)
    return result


class _Bounds:
    """The axis size and the clamping bounds as scalars of the index type, each built when first used."""

    def __init__(self, emit: Emitter, x: str, axis: int, size: int | str | None, index_type: int) -> None:
        self.emit, self.x, self.axis, self.static_size, self.index_type = emit, x, axis, size, index_type
        self.np_type = helper.tensor_dtype_to_np_dtype(index_type)

    @functools.cached_property
    def size(self) -> str:
        if isinstance(self.static_size, int):
            return self.emit.constant(self.static_size, self.np_type, "size")
        emit = self.emit
        shape = emit.node("Shape", [self.x], "data_shape")
        size = emit.squeeze(emit.slice(shape, self.axis, self.axis + 1, "axis_size"), [0], "size")
        return (
            size if self.index_type == TensorProto.INT64 else emit.node("Cast", [size], "size_cast", to=self.index_type)
        )

    @functools.cached_property
    def high(self) -> str:
        if isinstance(self.static_size, int):
            return self.emit.constant(max(self.static_size - 1, 0), self.np_type, "high")
        return self.emit.node("Sub", [self.size, self.emit.constant(1, self.np_type, "one")], "high")

    @functools.cached_property
    def low(self) -> str:
        if isinstance(self.static_size, int):
            return self.emit.constant(-self.static_size, self.np_type, "low")
        return self.emit.node("Neg", [self.size], "low")


def indices_in_bounds(indices: np.ndarray | None, sizes: Sequence[int | str | None]) -> bool:
    """Constant ``indices`` whose every value (every coordinate of a tuple, for several ``sizes``) lies inside its
    axis, whose size the model states: such a gather is in bounds on every run, whatever the mode says."""
    if indices is None or indices.dtype.kind not in "iu" or not all(isinstance(size, int) for size in sizes):
        return False
    if len(sizes) > 1 and (indices.ndim == 0 or indices.shape[-1] != len(sizes)):
        return False
    if indices.dtype == np.uint64 and bool((indices >= 2**63).any()):
        return False  # beyond every size (and beyond INT64)
    limits = np.array(sizes, np.int64)
    low = -limits if indices.dtype.kind == "i" else np.zeros_like(limits)
    values = indices.astype(np.int64)
    return bool(np.all((low <= values) & (values < limits)))


def mask_coordinates(work: DefUse, types: dict[str, ValueType], indices: str, dims: Sequence[int | str | None]) -> bool:
    """``indices`` = Transpose(NonZero(mask)) of a mask whose dims are ``dims`` (the same numbers or the same symbols):
    coordinates of elements of a tensor of those dims, in bounds on every run (``x[mask]`` as exporters write it)."""
    transpose = work.made_by(indices)
    if transpose is None or transpose.op_type != "Transpose" or transpose.domain not in ("", "ai.onnx"):
        return False
    perm = next((list(a.ints) for a in transpose.attribute if a.name == "perm"), [1, 0])
    nonzero = work.made_by(transpose.input[0])
    if perm != [1, 0] or nonzero is None or nonzero.op_type != "NonZero" or nonzero.domain not in ("", "ai.onnx"):
        return False
    mask = types.get(nonzero.input[0])
    return mask is not None and mask.dims is not None and None not in dims and tuple(mask.dims) == tuple(dims)


def native_indices(
    emit: Emitter, indices: str, index_type: int, taken: tuple[int, ...] = (TensorProto.INT32, TensorProto.INT64)
) -> str:
    """Indices as the native op takes them: Gather and GatherElements INT32 or INT64, GatherND INT64 only."""
    if index_type in taken:
        return indices
    return emit.node("Cast", [indices], "as_int64", to=TensorProto.INT64)


def fix_indices(
    emit: Emitter, x: str, indices: str, index_type: int, axis: int, size: int | str | None, mode: str
) -> tuple[str, str | None]:
    """Indices the native op takes (INT32 or INT64) with DML's meaning, and for ``zero`` the in-bounds mask."""
    signed = index_type in (TensorProto.INT32, TensorProto.INT64)
    if mode == "error" and signed:
        return indices, None  # the native op refuses out-of-bounds indices itself
    bounds = _Bounds(emit, x, axis, size, index_type)
    mask = None
    if mode == "zero":
        mask = emit.node("Less", [indices, bounds.size], "below_size")
        if signed:
            not_below_low = emit.node("Not", [emit.node("Less", [indices, bounds.low], "below_low")], "not_below_low")
            mask = emit.node("And", [mask, not_below_low], "in_bounds")
    if signed:  # clamp into [-size, size - 1]: the native op takes the negative ones
        if emit.opset >= 12 and index_type == TensorProto.INT32:
            return emit.node("Clip", [indices, bounds.low, bounds.high], "clamp"), mask
        if emit.opset >= 12:
            # ONNX Runtime 1.31's INT64 Clip left values beyond the int32 range unclamped (Clip(2^32 - 8, -6, 5)
            # gave 2^32 - 8; 1.32 clamps them, and the package admits 1.20 on). DOUBLE keeps every value's order
            # against the bounds, and the clamped ones exactly. Pinned by tests/test_workarounds.py.
            as_double = [
                emit.node("Cast", [v], f"{step}_double", to=TensorProto.DOUBLE)
                for v, step in ((indices, "indices"), (bounds.low, "low"), (bounds.high, "high"))
            ]
            clamped = emit.node("Clip", as_double, "clamp_double")
            return emit.node("Cast", [clamped], "clamp", to=TensorProto.INT64), mask
        below = emit.node("Less", [indices, bounds.low], "below_low")
        raised = emit.node("Where", [below, bounds.low, indices], "clamp_low")
        inside = emit.node("Less", [raised, bounds.size], "below_size")
        return emit.node("Where", [inside, raised, bounds.high], "clamp"), mask
    # Unsigned: the native op takes only signed indices. Capped at size, an out-of-bounds index stays one. Min-12 (the
    # lowering raises the model to opset 12 for it: ONNX Runtime has no UINT64 Where for a Less and Where instead).
    cap = bounds.size if mode == "error" else bounds.high
    capped = emit.node("Min", [indices, cap], "cap")
    return emit.node("Cast", [capped], "as_int64", to=TensorProto.INT64), mask


def fix_tuples(
    emit: Emitter, x: str, indices: str, index_type: int, batch: int, k: int, mode: str
) -> tuple[str, str | None]:
    """INT64 index tuples GatherND takes with DML's meaning in ``mode`` (``error``, ``clamp``, ``zero``), and for
    ``zero`` the mask of tuples wholly in bounds."""
    v = indices if index_type == TensorProto.INT64 else emit.node("Cast", [indices], "as_int64", to=TensorProto.INT64)
    if index_type == TensorProto.UINT64:  # from 2^63 a value is negative as INT64: keep it out of bounds
        huge = emit.constant(2**63 - 1, np.int64, "huge")
        v = emit.node("Where", [emit.node("Less", [v, emit.constant(0, np.int64, "zero")], "wrapped"), huge, v], "v")
    if mode == "error":
        return v, None  # the native op refuses out-of-bounds tuples itself
    sizes = emit.slice(emit.node("Shape", [x], "data_shape"), batch, batch + k, "tuple_sizes")
    low = emit.node("Neg", [sizes], "low")
    mask = None
    if mode == "zero":
        outside = emit.node(
            "Equal", [emit.node("Less", [v, sizes], "below_size"), emit.node("Less", [v, low], "below_low")], "outside"
        )
        # An Or over the k coordinates (not a ReduceMax: ONNX Runtime 1.31 gave an empty one the wrong shape;
        # pinned by tests/test_workarounds.py).
        coordinates = [
            emit.node("Gather", [outside, emit.constant(j, np.int64, f"j{j}")], f"outside{j}", axis=-1)
            for j in range(k)
        ]
        any_outside = functools.reduce(lambda a, b: emit.node("Or", [a, b], "any_outside"), coordinates)
        mask = emit.node("Not", [any_outside], "in_bounds")
    # Clamped through DOUBLE: ONNX Runtime 1.31's INT64 Min and Max were wrong beyond the int32 range (pinned by
    # tests/test_workarounds.py).
    double = [
        emit.node("Cast", [value], f"{step}_double", to=TensorProto.DOUBLE)
        for value, step in (
            (v, "v"),
            (low, "low"),
            (emit.node("Sub", [sizes, emit.constant(1, np.int64, "one")], "high"), "high"),
        )
    ]
    clamped = emit.node("Max", [emit.node("Min", [double[0], double[2]], "below_high"), double[1]], "clamp_double")
    return emit.node("Cast", [clamped], "clamp", to=TensorProto.INT64), mask
