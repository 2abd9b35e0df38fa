"""Fast implementations of the three DML gathers, for use inside ONNX Runtime, and the two scatters.

Each validates through ``semantics`` (once for each combination of shapes, types and attributes it meets) and then
gathers with ONNX Runtime's own native ``Gather``, ``GatherElements`` or ``GatherND`` kernel (``np.take`` for a small
Gather), which take negative indices as DirectML does and refuse an out-of-bounds one. Only then, rarely, is the
reference implementation called to apply ``fix()``, on the inputs already validated.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import onnxruntime
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument

from onnx_gather.core import scatter, semantics
from onnx_gather.graphs.emit import single_node_model

_T = TypeVar("_T")


def _signed_indices(indices: np.ndarray, size: int) -> np.ndarray | None:
    """Signed indices with the same values, or None if an unsigned index is out of bounds.

    Unsigned indices are checked here: read as signed, a value above 2**63 (or 2**31) would pass for
    a valid negative index. Signed indices are checked by the gather itself.
    """
    if indices.dtype.kind == "i":
        return indices
    if indices.size and int(indices.max()) >= size:
        return None
    if indices.dtype == np.uint64:
        return indices.view(np.int64)
    return indices.view(np.int32) if size <= 2**31 else indices.astype(np.int64)


# DmlGather runs ONNX Runtime's native Gather only where it beat np.take: slices (the contiguous run after the axis)
# of at least 1 KiB and outputs of at least 8 MiB; the measurements are in docs/measurements.md ("np.take or the
# native Gather").
_NATIVE_GATHER_SLICE_BYTES = 2**10
_NATIVE_GATHER_OUTPUT_BYTES = 2**23


def _stand_in(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An array of ``shape`` and ``dtype`` holding one element (broadcast): what validation reads of an array."""
    return np.broadcast_to(np.empty((), dtype), shape)


@functools.lru_cache(maxsize=4096)
def _checked(
    check: Callable[..., _T],
    input_shape: tuple[int, ...],
    dtype: np.dtype,
    indices_shape: tuple[int, ...],
    index_dtype: np.dtype,
    *attributes: object,
) -> _T:
    """``check(input, indices, *attributes)`` of arrays of these shapes and types, remembered: a kernel's checks read
    only its arrays' shapes and types, which a model's nodes meet again run after run (a GatherError, raised, is not
    remembered)."""
    return check(_stand_in(input_shape, dtype), _stand_in(indices_shape, index_dtype), *attributes)


def _gather_plan(
    input: np.ndarray, indices: np.ndarray, axis: int, index_dimensions: int, out_of_bounds: str, limit: int
) -> tuple[tuple[int, ...], bool, bool]:
    """DmlGather's output sizes, validated and within ``limit`` elements; whether a gather of the indices' last
    ``index_dimensions`` (np.take, the native Gather) computes it, which an empty output leaves to the reference (it
    reads no index, so neither would check them); whether the native Gather is the faster of the two."""
    output_sizes = semantics.validate_gather(input, indices, axis, index_dimensions, out_of_bounds)
    semantics.check_output_elements("DmlGather", output_sizes, limit)
    plain = semantics.plain_gather(input.shape, indices.shape, axis, index_dimensions) and 0 not in output_sizes
    large = math.prod(output_sizes) * input.itemsize >= _NATIVE_GATHER_OUTPUT_BYTES
    native = large and math.prod(input.shape[axis + 1 :]) * input.itemsize >= _NATIVE_GATHER_SLICE_BYTES
    return output_sizes, plain, native


def gather(
    input: np.ndarray,
    indices: np.ndarray,
    axis: int,
    index_dimensions: int,
    out_of_bounds: str,
    *,
    max_output_elements: int,
) -> np.ndarray:
    """DML_GATHER with the results of ``semantics.dml_gather``; no output of more than ``max_output_elements``
    elements is allocated (so in the other two)."""
    output_sizes, plain, native = _checked(
        _gather_plan,
        input.shape,
        input.dtype,
        indices.shape,
        indices.dtype,
        axis,
        index_dimensions,
        out_of_bounds,
        max_output_elements,
    )
    signed = _signed_indices(indices, input.shape[axis]) if plain else None
    if signed is not None:
        index = signed.reshape(indices.shape[input.ndim - index_dimensions :])
        try:
            if native:
                session = _native("Gather", input.dtype, index.dtype, axis=axis)
                return session.run(None, {"input": input, "indices": index})[0].reshape(output_sizes)
            return input.take(index, axis=axis).reshape(output_sizes)  # np.take, less its 0.8 us wrapper
        except (InvalidArgument, IndexError):  # an index out of bounds (the native kernel's error, np.take's)
            pass
    return semantics.gather_validated(input, indices, axis, index_dimensions, out_of_bounds, output_sizes)


@functools.cache
def _native(op_type: str, dtype: np.dtype, index_dtype: np.dtype, **attributes: int) -> onnxruntime.InferenceSession:
    """A session holding ONNX Runtime's native ``op_type`` for one type pair and its attributes."""
    model = single_node_model(op_type, dtype, index_dtype, domain="", **attributes)
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4  # an out-of-bounds index is expected here, not worth a log line
    # Runs nest inside the caller's session: idle threads spinning here would take the cores it runs on.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _gather_elements_plan(input: np.ndarray, indices: np.ndarray, axis: int, out_of_bounds: str, limit: int) -> None:
    """A GatherError where DML_GATHER_ELEMENTS is refused or its output holds more than ``limit`` elements."""
    semantics.validate_gather_elements(input, indices, axis, out_of_bounds)
    semantics.check_output_elements("DmlGatherElements", indices.shape, limit)


def gather_elements(
    input: np.ndarray, indices: np.ndarray, axis: int, out_of_bounds: str, *, max_output_elements: int
) -> np.ndarray:
    """DML_GATHER_ELEMENTS with the results of ``semantics.dml_gather_elements``."""
    limit = max_output_elements
    _checked(_gather_elements_plan, input.shape, input.dtype, indices.shape, indices.dtype, axis, out_of_bounds, limit)
    signed = _signed_indices(indices, input.shape[axis])
    if signed is not None:
        session = _native("GatherElements", input.dtype, signed.dtype, axis=axis)
        try:
            return session.run(None, {"input": input, "indices": signed})[0]
        except Fail:  # an index out of bounds
            pass
    return semantics.gather_elements_validated(input, indices, axis, out_of_bounds)


def _gather_nd_plan(
    input: np.ndarray,
    indices: np.ndarray,
    input_dimension_count: int,
    indices_dimension_count: int,
    batch_dimension_count: int,
    out_of_bounds: str,
    limit: int,
) -> tuple[tuple[int, ...], bool]:
    """DML_GATHER_ND1's output sizes, validated and within ``limit`` elements, and whether ONNX's GatherND computes
    it: its batches agree, and its output is not empty (which reads no index, so it would check none)."""
    counts = (input_dimension_count, indices_dimension_count, batch_dimension_count)
    output_sizes = semantics.validate_gather_nd(input, indices, *counts, out_of_bounds)
    semantics.check_output_elements("DmlGatherNd", output_sizes, limit)
    data = input.shape[input.ndim - input_dimension_count :]
    index = indices.shape[indices.ndim - indices_dimension_count :]
    batches_agree = data[:batch_dimension_count] == index[:batch_dimension_count]
    return output_sizes, batches_agree and 0 not in output_sizes


def gather_nd(
    input: np.ndarray,
    indices: np.ndarray,
    input_dimension_count: int,
    indices_dimension_count: int,
    batch_dimension_count: int,
    out_of_bounds: str,
    *,
    max_output_elements: int,
) -> np.ndarray:
    """DML_GATHER_ND1 with the results of ``semantics.dml_gather_nd``."""
    counts = (input_dimension_count, indices_dimension_count, batch_dimension_count)
    output_sizes, native = _checked(
        _gather_nd_plan,
        input.shape,
        input.dtype,
        indices.shape,
        indices.dtype,
        *counts,
        out_of_bounds,
        max_output_elements,
    )
    # ONNX's GatherND takes INT64 indices only; an unsigned one from 2^31 is out of bounds (no dimension is that
    # large) and, as INT64, could pass for a negative one.
    wide = indices.dtype.kind == "u" and indices.size and int(indices.max()) >= 2**31
    if native and not wide:
        data = input.reshape(input.shape[input.ndim - input_dimension_count :])
        index = indices.reshape(indices.shape[indices.ndim - indices_dimension_count :])
        index = index.astype(np.int64, copy=False)
        session = _native("GatherND", input.dtype, np.dtype(np.int64), batch_dims=batch_dimension_count)
        try:
            return session.run(None, {"input": data, "indices": index})[0].reshape(output_sizes)
        except InvalidArgument:  # an index out of bounds
            pass
    return semantics.gather_nd_validated(input, indices, *counts, out_of_bounds, output_sizes)


def scatter_elements(
    input: np.ndarray,
    indices: np.ndarray,
    updates: np.ndarray,
    axis: int,
    out_of_bounds: str,
    duplicates: str,
    *,
    max_output_elements: int,
) -> np.ndarray:
    """DML_SCATTER: ``scatter.dml_scatter_elements``; its output has the input's sizes, checked against the limit."""
    semantics.check_output_elements("DmlScatterElements", input.shape, max_output_elements)
    return scatter.dml_scatter_elements(input, indices, updates, axis, out_of_bounds, duplicates)


def scatter_nd(
    input: np.ndarray,
    indices: np.ndarray,
    updates: np.ndarray,
    input_dimension_count: int,
    indices_dimension_count: int,
    out_of_bounds: str,
    duplicates: str,
    *,
    max_output_elements: int,
) -> np.ndarray:
    """DML_SCATTER_ND: ``scatter.dml_scatter_nd``, its output checked against the limit as ``scatter_elements``'."""
    semantics.check_output_elements("DmlScatterNd", input.shape, max_output_elements)
    return scatter.dml_scatter_nd(
        input, indices, updates, input_dimension_count, indices_dimension_count, out_of_bounds, duplicates
    )
