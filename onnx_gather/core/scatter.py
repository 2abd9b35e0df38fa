"""DirectML's ScatterElements and ScatterND (DML_SCATTER, DML_SCATTER_ND), stated in numpy (docs/semantics.md
section 10), on tensors as ONNX Runtime's provider hands them to DirectML: all of one dimension count N (1 to 8),
lower ranks padded with leading 1s.

``output = input``, then each update is written at the element its index names. Out of bounds, DirectML does not
clamp: it computes the element's linear offset in 32-bit words (``scatter_elements_offsets``,
``scatter_nd_offsets``) and drops the write only where that offset is past the output's memory, so an index past the
end of an inner axis writes into the next row. Which of several writes to one element wins is a race on DirectML
(``duplicates``). This module imports no runtime; the custom ops and the conformance harnesses call it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from onnx_gather.core.contract import DATA_DTYPES, INDEX_DTYPES, mode_refusal
from onnx_gather.core.descs import packed_strides
from onnx_gather.core.errors import UserError
from onnx_gather.core.reading import MASK32, axis_words
from onnx_gather.core.semantics import GatherError, fix_indices
from onnx_gather.core.sizes import MAX_DIMENSION_COUNT

SCATTER_MODES = ("directml", "clamp", "error")  # what an out-of-bounds index does (section 10)
DUPLICATE_MODES = ("last", "error")  # several updates of one element: the last wins, or an error (DirectML races)


class ScatterError(UserError):
    """A scatter DirectML refuses, an out-of-bounds index under ``out_of_bounds="error"``, or duplicates under
    ``duplicates="error"``."""


def _check(op: str, input: np.ndarray, indices: np.ndarray, updates: np.ndarray, out_of_bounds: str, duplicates: str):
    refusal = mode_refusal(out_of_bounds, modes=SCATTER_MODES) or mode_refusal(
        duplicates, "duplicates", DUPLICATE_MODES
    )
    if refusal is not None:
        raise ScatterError(f"{op}: {refusal}")
    if input.dtype not in DATA_DTYPES or updates.dtype != input.dtype:
        raise ScatterError(f"{op}: input {input.dtype.name} and updates {updates.dtype.name}: one of DirectML's types")
    if indices.dtype not in INDEX_DTYPES:
        raise ScatterError(f"{op}: indices type {indices.dtype.name} is not supported (INT32, INT64, UINT32, UINT64)")
    if not (1 <= input.ndim <= MAX_DIMENSION_COUNT and input.ndim == indices.ndim == updates.ndim):
        raise ScatterError(f"{op}: input, indices and updates need one dimension count of 1 to {MAX_DIMENSION_COUNT}")
    if 0 in input.shape:
        raise ScatterError(f"{op}: an input of size 0 {input.shape}")


def _coordinate_offsets(shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """The offset ``sum(coordinate * stride)`` of every position of ``shape``, as uint64 of that shape."""
    offsets = np.zeros(shape, np.uint64)
    for d, (size, stride) in enumerate(zip(shape, strides, strict=True)):
        offsets += (np.arange(size, dtype=np.uint64) * np.uint64(stride)).reshape((-1,) + (1,) * (len(shape) - d - 1))
    return offsets


def scatter_elements_offsets(shape: tuple[int, ...], indices: np.ndarray, axis: int) -> np.ndarray:
    """DML_SCATTER: the output element each update writes, in the updates' row-major order: the update's own
    coordinates with the index's word (``core.reading.axis_words``: low 32 bits, plus the axis size where the value
    is negative; 0 on an axis of size 1) on the axis, times the output's row-major strides, summed in 32 bits."""
    strides = packed_strides(tuple(shape))
    others = _coordinate_offsets(indices.shape, tuple(0 if d == axis else s for d, s in enumerate(strides)))
    words = axis_words(indices, shape[axis])
    return ((others + words * np.uint64(strides[axis])) & MASK32).reshape(-1)


def scatter_nd_offsets(shape: tuple[int, ...], tuples: np.ndarray) -> np.ndarray:
    """DML_SCATTER_ND: the output element each update writes, ``tuples`` (M, k) over the first k of ``shape`` (the
    input's meaningful sizes): each coordinate's word times its row-major stride, plus the slice's offset, in 32
    bits; (M * slice) offsets in the updates' order."""
    k = tuples.shape[-1]
    strides = packed_strides(tuple(shape))
    start = np.zeros(tuples.shape[0], np.uint64)
    for j in range(k):
        start += axis_words(tuples[:, j], shape[j]) * np.uint64(strides[j])
    inner = np.arange(int(np.prod(shape[k:], dtype=np.int64)), dtype=np.uint64)
    return ((start[:, None] + inner[None, :]) & MASK32).reshape(-1)


def _fixed(op: str, indices: np.ndarray, size: int, out_of_bounds: str) -> np.ndarray:
    """``indices`` clamped (``clamp``) or checked (``error``) on an axis of ``size``, as int64 in range."""
    try:
        return fix_indices(op, indices, size, "error" if out_of_bounds == "error" else "clamp")[0].astype(np.int64)
    except GatherError as error:
        raise ScatterError(str(error)) from None


def _write(op: str, input: np.ndarray, offsets: np.ndarray, updates: np.ndarray, duplicates: str) -> np.ndarray:
    """``input`` with each update written at its offset, those past the output dropped; of several writes to one
    element the last, or with ``duplicates="error"`` an error where they differ."""
    output = input.copy().reshape(-1)
    values = updates.reshape(-1)
    inside = offsets < np.uint64(output.size)
    offsets, values = offsets[inside].astype(np.intp), values[inside]
    written, first_from_end = np.unique(offsets[::-1], return_index=True)
    last = len(offsets) - 1 - first_from_end  # each written element's last write, in the order of ``written``
    if duplicates == "error" and len(last) < len(offsets):
        raw = values.view(np.uint8).reshape(len(values), -1)
        differs = np.flatnonzero((raw != raw[last[np.searchsorted(written, offsets)]]).any(axis=1))
        if differs.size:
            raise ScatterError(
                f"{op}: several updates of different values write output element {int(offsets[differs[0]])}: which "
                "one DirectML keeps is a race between GPU threads (docs/semantics.md section 10)"
            )
    output[offsets[last]] = values[last]
    return output.reshape(input.shape)


def scatter_elements_refusal(input: Sequence, indices: Sequence, updates: Sequence | None, axis: int) -> str:
    """Why DirectML refuses a DML_SCATTER of these dims (its CreateOperator and ONNX Runtime's session creation:
    80070057), "" where it takes them: indices larger than the input along ``axis`` or other than its sizes off it,
    updates of other dims than the indices. A dim that is not a number (unknown, a symbol) passes."""

    def known(a: object, b: object) -> bool:
        return isinstance(a, int) and isinstance(b, int)

    for d, (size, count) in enumerate(zip(input, indices, strict=True)):
        if d == axis and known(size, count) and count > size:
            return f"indices of {count} on axis {axis}, more than the input's {size}"
        if d != axis and known(size, count) and count != size:
            return f"indices of {count} on dimension {d}, not the input's {size}"
    if updates is not None and any(known(u, i) and u != i for u, i in zip(updates, indices, strict=True)):
        return f"updates of dims {tuple(updates)}, not the indices' {tuple(indices)}"
    return ""


def dml_scatter_elements(
    input: np.ndarray,
    indices: np.ndarray,
    updates: np.ndarray,
    axis: int,
    out_of_bounds: str = "directml",
    duplicates: str = "last",
) -> np.ndarray:
    """DML_SCATTER: ``output = input``, then ``output[i, indices[i, j, k], k] = updates[i, j, k]`` for axis 1.

    ``indices`` and ``updates`` have one shape: the input's on every dimension but ``axis``, at most the input's on
    it. ``out_of_bounds``: ``directml`` (what DirectML 1.15.4 does: ``scatter_elements_offsets``, writes past the
    output dropped), ``clamp`` (each index clamped into its axis) or ``error``.
    """
    op = "DmlScatterElements"
    input, indices, updates = np.asarray(input), np.asarray(indices), np.asarray(updates)
    _check(op, input, indices, updates, out_of_bounds, duplicates)
    if not 0 <= axis < input.ndim:
        raise ScatterError(f"{op}: axis {axis} outside [0, {input.ndim})")
    if indices.ndim != input.ndim or updates.ndim != input.ndim:
        raise ScatterError(f"{op}: input, indices and updates must have one rank ({input.ndim})")
    refusal = scatter_elements_refusal(input.shape, indices.shape, updates.shape, axis)
    if refusal:
        raise ScatterError(f"{op}: {refusal}: DirectML refuses it")
    if out_of_bounds != "directml":
        indices = _fixed(op, indices, input.shape[axis], out_of_bounds)
    return _write(op, input, scatter_elements_offsets(input.shape, indices, axis), updates, duplicates)


def dml_scatter_nd(
    input: np.ndarray,
    indices: np.ndarray,
    updates: np.ndarray,
    input_dimension_count: int,
    indices_dimension_count: int,
    out_of_bounds: str = "directml",
    duplicates: str = "last",
) -> np.ndarray:
    """DML_SCATTER_ND: ``output = input``, then ``output[indices[i..., :], s...] = updates[i..., s...]``.

    Of the N sizes only the last ``input_dimension_count`` X of the input and ``indices_dimension_count`` Q of the
    indices count (the others are 1); the indices' last size k (1 to X) is the tuple length, and the updates' sizes
    are exactly ``indices[:-1] + input[k:]`` (meaningful sizes) with leading 1s. ``out_of_bounds`` as in
    ``dml_scatter_elements``, per coordinate (``scatter_nd_offsets``). Empty indices (no tuple): ONNX Runtime's
    provider leaves the output unwritten (measured: zeros, where ONNX gives the input), and so zeros here, as for
    the gathers' unwritten outputs.
    """
    op = "DmlScatterNd"
    input, indices, updates = np.asarray(input), np.asarray(indices), np.asarray(updates)
    _check(op, input, indices, updates, out_of_bounds, duplicates)
    n, x, q = input.ndim, input_dimension_count, indices_dimension_count
    data, index = input.shape[n - x :] if 1 <= x <= n else (), indices.shape[n - q :] if 1 <= q <= n else ()
    k = index[-1] if index else 0
    meaning = (*index[:-1], *data[k:])
    if (
        not data
        or not index
        or not 1 <= k <= x
        or len(meaning) > n
        or any(s != 1 for s in (*input.shape[: n - x], *indices.shape[: n - q]))
        or updates.shape != (1,) * (n - len(meaning)) + meaning
    ):
        raise ScatterError(
            f"{op}: input {input.shape}, indices {indices.shape}, updates {updates.shape} with counts {x} and {q}: "
            "the updates must be indices[:-1] + input[k:] of the counted sizes, tuples of 1 to X coordinates "
            "(DirectML refuses the rest)"
        )
    tuples = indices.reshape(-1, k)
    if not len(tuples):
        return np.zeros_like(input)
    if out_of_bounds != "directml":
        tuples = np.stack([_fixed(op, tuples[:, j], data[j], out_of_bounds) for j in range(k)], axis=-1)
    return _write(op, input, scatter_nd_offsets(data, tuples), updates, duplicates)
