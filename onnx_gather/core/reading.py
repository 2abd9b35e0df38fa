"""What DirectML reads for an out-of-bounds index, in numpy (docs/semantics.md section 4.3): the axis coordinate
from the index's low 32 bits, the linear offset in wrapping 32-bit arithmetic, clamped to the tensor's memory
rounded up to 4 bytes, whose padding reads 0."""

from __future__ import annotations

import numpy as np

from onnx_gather.core import predict
from onnx_gather.core.contract import DIRECTML_16BIT, NUMPY_NAMES
from onnx_gather.core.descs import Case, TensorDesc, to_buffer

MASK32 = np.uint64(0xFFFFFFFF)  # a 32-bit word


def axis_words(indices: np.ndarray, size: int) -> np.ndarray:
    """DirectML's axis coordinate for each index: its low 32 bits, plus ``size`` if the value's top bit is set
    (INT32, INT64 and UINT64 alike; UINT32 values are never negative), wrapping at 2^32; 0 on an axis of size 1
    (docs/semantics.md section 4.3, steps 1 and 2). As uint64."""
    if size == 1:
        return np.zeros(indices.shape, np.uint64)
    low = indices.astype(np.uint64) & MASK32  # two's complement: the low word of a negative value
    if indices.dtype == np.uint32:
        return low
    negative = indices.view(np.int64) < 0 if indices.dtype == np.uint64 else indices < 0
    return np.where(negative, (low + np.uint64(size)) & MASK32, low)


def directml_read(input: np.ndarray, axis: int, words: np.ndarray, element_size: int) -> np.ndarray:
    """What DirectML reads for axis coordinates ``words`` of shape (P, K, S), P and S the sizes before and after the
    axis (1 where ``words`` broadcasts): the element at the linear offset, in wrapping 32-bit arithmetic, clamped
    to the tensor's memory rounded up to 4 bytes, where the padding reads 0 (section 4.3, steps 3 to 5)."""
    outer = int(np.prod(input.shape[:axis], dtype=np.int64))
    rows = np.arange(outer, dtype=np.uint64).reshape(-1, 1, 1) * np.uint64(input.shape[axis]) + words
    return read_rows(input, rows, int(np.prod(input.shape[axis + 1 :], dtype=np.int64)), element_size)


def read_rows(input: np.ndarray, rows: np.ndarray, inner: int, element_size: int) -> np.ndarray:
    """What DirectML reads at element offsets ``rows * inner + s``, s along the last axis of ``rows`` (of size 1,
    broadcast to ``inner``, or ``inner`` itself): wrapping at 2^32, clamped to the tensor's memory rounded up to 4
    bytes, whose padding reads 0."""
    offsets = ((rows & MASK32) * np.uint64(inner) + np.arange(inner, dtype=np.uint64)) & MASK32
    return read_offsets(input, offsets, element_size)


def read_offsets(input: np.ndarray, offsets: np.ndarray, element_size: int) -> np.ndarray:
    """What DirectML reads at these element offsets (32-bit words): clamped to the tensor's memory rounded up to 4
    bytes, whose padding reads 0."""
    flat = input.reshape(-1)
    if flat.size == 0:  # nothing to read: DirectML leaves the output as its memory was (unpredictable); 0 here
        return np.zeros(offsets.shape, input.dtype)
    capacity = -(-flat.size * element_size // 4) * 4 // element_size
    padded = np.zeros(capacity, input.dtype)
    padded[: flat.size] = flat
    return padded[np.minimum(offsets, np.uint64(capacity - 1)).astype(np.intp)]


def element_size(input: np.ndarray, out_of_bounds: str) -> int:
    return 2 if out_of_bounds == DIRECTML_16BIT else input.dtype.itemsize


def directml_desc_gather(
    input: np.ndarray,
    indices: np.ndarray,
    axis: int,
    index_dimensions: int,
    output_sizes: tuple[int, ...],
    out_of_bounds: str,
) -> np.ndarray:
    """DML_GATHER beyond ONNX's Gather, on the descs ONNX Runtime's provider would make of these arrays: the element
    offsets ``predict`` states for DirectML called directly, read as section 4.3 reads them."""
    descs = [
        TensorDesc.provider(NUMPY_NAMES[array.dtype], shape)
        for array, shape in ((input, input.shape), (indices, indices.shape), (input, output_sizes))
    ]
    case = Case(
        "GATHER",
        {"axis": axis, "index_dimensions": index_dimensions},
        *descs,
        bytes(descs[0].total_bytes),
        to_buffer(descs[1], indices),
    )
    offsets = predict.element_offsets(case)
    return read_offsets(input, offsets, element_size(input, out_of_bounds)).reshape(output_sizes)


def directml_gather_nd(
    input: np.ndarray, indices: np.ndarray, input_count: int, indices_count: int, batch: int, element_size: int
) -> np.ndarray:
    """What DirectML reads for DML_GATHER_ND1 (section 4.3): per tuple of the indices, in their order, the slice at
    its batch coordinates (the indices' own, which may pass the input's batch sizes) times the input's strides plus
    its coordinates' words times theirs, in wrapping 32-bit arithmetic, clamped to the tensor's memory."""
    data = input.shape[input.ndim - input_count :]
    index = indices.shape[indices.ndim - indices_count :]
    k = index[-1]
    tuples = indices.reshape(-1, k)
    positions = np.unravel_index(np.arange(tuples.shape[0]), index[:-1]) if len(index) > 1 else ()
    # Strides in slices of the dims after the tuple's (whose elements a tuple reads in a row); 0 on a dimension of
    # size 1, as ONNX Runtime's provider was measured to read (a batch past such a dimension reads its one row).
    steps = [int(np.prod(data[d + 1 : batch + k], dtype=np.int64)) if data[d] != 1 else 0 for d in range(batch + k)]
    rows = np.zeros(tuples.shape[0], np.uint64)
    for q in range(batch):
        rows = (rows + positions[q].astype(np.uint64) * np.uint64(steps[q])) & MASK32
    for c in range(k):
        rows = (rows + axis_words(tuples[:, c], data[batch + c]) * np.uint64(steps[batch + c])) & MASK32
    inner = int(np.prod(data[batch + k :], dtype=np.int64))
    return read_rows(input, rows[:, None], inner, element_size)
