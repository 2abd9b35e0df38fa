"""Fast implementations of the three DML operators, for use inside ONNX Runtime.

Each validates through ``semantics`` and then gathers with ``np.take`` or ONNX Runtime's own native
``GatherElements`` or ``GatherND`` kernel, which take negative indices as DirectML does and refuse an
out-of-bounds one. Only then, rarely, is the reference implementation called to apply ``fix()``.
"""

from __future__ import annotations

import functools

import numpy as np
import onnxruntime
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument

from onnx_gather.core import semantics
from onnx_gather.graphs.emit import single_node_model

# No output larger than this is allocated (ops.set_max_output_elements; the command line's --max-elements).
max_output_elements = 2**31


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


def gather(input: np.ndarray, indices: np.ndarray, axis: int, index_dimensions: int, out_of_bounds: str) -> np.ndarray:
    """DML_GATHER with the results of ``semantics.dml_gather``."""
    semantics.check_types("DmlGather", input.dtype, indices.dtype)
    semantics.check_out_of_bounds("DmlGather", out_of_bounds)
    output_sizes = semantics.gather_output_sizes(input.shape, indices.shape, axis, index_dimensions)
    semantics.check_output_elements("DmlGather", output_sizes, max_output_elements)
    signed = _signed_indices(indices, input.shape[axis])
    # An empty output reads no index, so np.take would not check them: the reference does.
    if signed is not None and 0 not in output_sizes:
        try:
            index_shape = indices.shape[input.ndim - index_dimensions :]
            return np.take(input, signed.reshape(index_shape), axis=axis).reshape(output_sizes)
        except IndexError:  # an index out of bounds
            pass
    return semantics.dml_gather(input, indices, axis, index_dimensions, out_of_bounds)


@functools.cache
def _native(op_type: str, dtype: np.dtype, index_dtype: np.dtype, **attributes: int) -> onnxruntime.InferenceSession:
    """A session holding ONNX Runtime's native ``op_type`` for one type pair and its attributes."""
    model = single_node_model(op_type, dtype, index_dtype, domain="", **attributes)
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4  # an out-of-bounds index is expected here, not worth a log line
    # Runs nest inside the caller's session: idle threads spinning here would take the cores it runs on.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def gather_elements(input: np.ndarray, indices: np.ndarray, axis: int, out_of_bounds: str) -> np.ndarray:
    """DML_GATHER_ELEMENTS with the results of ``semantics.dml_gather_elements``."""
    semantics.check_types("DmlGatherElements", input.dtype, indices.dtype)
    semantics.check_out_of_bounds("DmlGatherElements", out_of_bounds)
    semantics.check_gather_elements(input.shape, indices.shape, axis)
    semantics.check_output_elements("DmlGatherElements", indices.shape, max_output_elements)
    signed = _signed_indices(indices, input.shape[axis])
    if signed is not None:
        session = _native("GatherElements", input.dtype, signed.dtype, axis=axis)
        try:
            return session.run(None, {"input": input, "indices": signed})[0]
        except Fail:  # an index out of bounds
            pass
    return semantics.dml_gather_elements(input, indices, axis, out_of_bounds)


def gather_nd(
    input: np.ndarray,
    indices: np.ndarray,
    input_dimension_count: int,
    indices_dimension_count: int,
    batch_dimension_count: int,
    out_of_bounds: str,
) -> np.ndarray:
    """DML_GATHER_ND1 with the results of ``semantics.dml_gather_nd``."""
    op = "DmlGatherNd"
    semantics.check_types(op, input.dtype, indices.dtype)
    semantics.check_out_of_bounds(op, out_of_bounds)
    output_sizes = semantics.gather_nd_output_sizes(
        input.shape, indices.shape, input_dimension_count, indices_dimension_count, batch_dimension_count
    )
    semantics.check_output_elements(op, output_sizes, max_output_elements)
    # ONNX's GatherND takes INT64 indices only; an unsigned one from 2^31 is out of bounds (no dimension is that
    # large) and, as INT64, could pass for a negative one.
    data = input.reshape(input.shape[input.ndim - input_dimension_count :])
    index = indices.reshape(indices.shape[indices.ndim - indices_dimension_count :])
    native = data.shape[:batch_dimension_count] == index.shape[:batch_dimension_count]  # ONNX's batches agree
    wide = indices.dtype.kind == "u" and indices.size and int(indices.max()) >= 2**31
    if native and 0 not in output_sizes and not wide:
        index = index.astype(np.int64, copy=False)
        session = _native("GatherND", input.dtype, np.dtype(np.int64), batch_dims=batch_dimension_count)
        try:
            return session.run(None, {"input": data, "indices": index})[0].reshape(output_sizes)
        except InvalidArgument:  # an index out of bounds
            pass
    return semantics.dml_gather_nd(
        input, indices, input_dimension_count, indices_dimension_count, batch_dimension_count, out_of_bounds
    )
