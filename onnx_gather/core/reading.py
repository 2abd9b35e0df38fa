"""What DirectML reads for an out-of-bounds index, in numpy (docs/semantics.md section 4.3): the axis coordinate
from the index's low 32 bits, the linear offset in wrapping 32-bit arithmetic, clamped to the tensor's memory
rounded up to 4 bytes, whose padding reads 0."""

from __future__ import annotations

import numpy as np

from onnx_gather.core.contract import DIRECTML_16BIT

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
