"""Fast implementations of the two DML operators, for use inside ONNX Runtime.

Each validates through ``semantics`` and then, when every index is already in bounds (the common
case, found with one min/max pass), gathers with ``np.take`` or ONNX Runtime's own native
``GatherElements`` kernel. An out-of-bounds index sends the call to the reference implementation,
which applies ``fix()``.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import onnxruntime

from onnx_gather import semantics


def _in_bounds(indices: np.ndarray, size: int) -> bool:
    """Whether every index is already valid, negative ones counting from the end."""
    if indices.size == 0:
        return True
    if int(indices.max()) >= size:
        return False
    return indices.dtype.kind == "u" or int(indices.min()) >= -size


def _as_native_indices(indices: np.ndarray) -> np.ndarray:
    """Signed indices holding the same in-bounds values, without a copy where the width allows."""
    if indices.dtype == np.uint64:
        return indices.view(np.int64)  # in bounds, so below 2**63
    if indices.dtype == np.uint32:
        if indices.size == 0 or int(indices.max()) < 2**31:
            return indices.view(np.int32)
        return indices.astype(np.int64)
    return indices


def gather(input: np.ndarray, indices: np.ndarray, axis: int, index_dimensions: int, out_of_bounds: str) -> np.ndarray:
    """DML_GATHER with the results of ``semantics.dml_gather``, faster on in-bounds indices."""
    semantics.check_types("DmlGather", input.dtype, indices.dtype)
    semantics.check_out_of_bounds("DmlGather", out_of_bounds)
    output_sizes = semantics.gather_output_sizes(input.shape, indices.shape, axis, index_dimensions)
    if not _in_bounds(indices, input.shape[axis]):
        return semantics.dml_gather(input, indices, axis, index_dimensions, out_of_bounds)
    index_shape = indices.shape[input.ndim - index_dimensions :]
    result = np.take(input, _as_native_indices(indices).reshape(index_shape), axis=axis)
    return result.reshape(output_sizes)


@functools.cache
def _native_gather_elements(dtype: np.dtype, index_dtype: np.dtype, axis: int) -> onnxruntime.InferenceSession:
    """A session holding ONNX Runtime's native GatherElements for one type pair and axis."""
    to_onnx = onnx.helper.np_dtype_to_tensor_dtype
    node = onnx.helper.make_node("GatherElements", ["input", "indices"], ["output"], axis=axis)
    graph = onnx.helper.make_graph(
        [node],
        "native_gather_elements",
        [
            onnx.helper.make_tensor_value_info("input", to_onnx(dtype), None),
            onnx.helper.make_tensor_value_info("indices", to_onnx(index_dtype), None),
        ],
        [onnx.helper.make_tensor_value_info("output", to_onnx(dtype), None)],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)], ir_version=8)
    return onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def gather_elements(input: np.ndarray, indices: np.ndarray, axis: int, out_of_bounds: str) -> np.ndarray:
    """DML_GATHER_ELEMENTS with the results of ``semantics.dml_gather_elements``, faster on in-bounds indices."""
    semantics.check_types("DmlGatherElements", input.dtype, indices.dtype)
    semantics.check_out_of_bounds("DmlGatherElements", out_of_bounds)
    semantics.check_gather_elements(input.shape, indices.shape, axis)
    if not _in_bounds(indices, input.shape[axis]):
        return semantics.dml_gather_elements(input, indices, axis, out_of_bounds)
    native_indices = _as_native_indices(indices)
    session = _native_gather_elements(input.dtype, native_indices.dtype, axis)
    return session.run(None, {"input": input, "indices": native_indices})[0]
