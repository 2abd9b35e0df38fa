"""DirectML's Gather, GatherElements and GatherND, stated in numpy (docs/semantics.md sections 1-5 and 8), on the
tensors ONNX Runtime's provider hands DirectML; ``onnx_gather.core.predict`` states DirectML for any buffer desc.

This module is the reference the rest of the package is tested against. It imports no
runtime: every rule is readable here (the sizes each op takes and gives in ``core.sizes``), and testable without
ONNX Runtime.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from onnx_gather.core.contract import DATA_DTYPES, INDEX_DTYPES, mode_refusal
from onnx_gather.core.errors import UserError
from onnx_gather.core.reading import axis_words, directml_desc_gather, directml_gather_nd, directml_read, element_size
from onnx_gather.core.sizes import Refusal, gather_elements_sizes, gather_nd_sizes, gather_sizes


class GatherError(UserError):
    """A gather DirectML would refuse, or an out-of-bounds index under ``out_of_bounds="error"``."""


def check_types(op: str, input_dtype: np.dtype, indices_dtype: np.dtype) -> None:
    """Raise GatherError unless both element types are ones DirectML accepts."""
    if np.dtype(input_dtype) not in DATA_DTYPES:
        allowed = ", ".join(d.name for d in DATA_DTYPES)
        raise GatherError(f"{op}: input type {np.dtype(input_dtype).name} is not supported (supported: {allowed})")
    if np.dtype(indices_dtype) not in INDEX_DTYPES:
        allowed = ", ".join(d.name for d in INDEX_DTYPES)
        raise GatherError(f"{op}: indices type {np.dtype(indices_dtype).name} is not supported (supported: {allowed})")


def check_out_of_bounds(op: str, out_of_bounds: str) -> None:
    """Raise GatherError unless ``out_of_bounds`` names one of the modes."""
    refusal = mode_refusal(out_of_bounds)
    if refusal is not None:
        raise GatherError(f"{op}: {refusal}")


def gather_output_sizes(
    input_sizes: Sequence[int], indices_sizes: Sequence[int], axis: int, index_dimensions: int
) -> tuple[int, ...]:
    """The output sizes of DML_GATHER (``core.sizes.gather_sizes``); a GatherError where DirectML refuses the shapes
    and attributes, or is not safe on them (docs/semantics.md sections 2 and 8)."""
    attributes = {"axis": axis, "index_dimensions": index_dimensions}
    return _taken("DmlGather", gather_sizes(input_sizes, indices_sizes, attributes))


def _taken(op: str, result: tuple | Refusal) -> tuple[int, ...]:
    """The output sizes ``core.sizes`` gives, or the GatherError saying why DirectML does not take them."""
    if isinstance(result, Refusal):
        raise GatherError(f"{op}: {result.reason}")
    return result


def plain_gather(input_sizes: Sequence[int], indices_sizes: Sequence[int], axis: int, index_dimensions: int) -> bool:
    """Whether a valid DML_GATHER is an ONNX Gather with leading 1s, as ONNX Runtime's provider makes them: index
    sizes 1 before the last ``index_dimensions``, and an output that crops only the input's leading 1s."""
    n, cropped = len(input_sizes), max(index_dimensions - 1, 0)  # C's first entries: the input's before the axis
    leading = (*indices_sizes[: n - index_dimensions], *input_sizes[:cropped])
    return cropped <= axis and all(size == 1 for size in leading)


def check_output_elements(op: str, sizes: Sequence[int], limit: int) -> None:
    """Raise GatherError if an output of ``sizes`` would hold more than ``limit`` elements (before allocating it)."""
    elements = 1
    for size in sizes:
        elements *= int(size)
    if elements > limit:
        raise GatherError(
            f"{op}: the output {tuple(sizes)} would have {elements} elements, more than the limit {limit}"
        )


def fix_indices(op: str, indices: np.ndarray, size: int, out_of_bounds: str) -> tuple[np.ndarray, np.ndarray]:
    """Apply ``fix()`` of docs/semantics.md section 4: negative values count from the end, the rest per the mode.

    Returns the fixed indices (``intp``, each in ``[0, size)``, or 0 where ``size`` is 0) and a
    boolean mask of the positions that were out of bounds. Raises GatherError in ``error`` mode.
    """
    check_out_of_bounds(op, out_of_bounds)
    highest = max(size - 1, 0)  # an empty axis has nothing to clamp to; callers read a zero row there
    out_of_range = _out_of_range(indices, size)
    if indices.dtype.kind == "u":
        fixed = np.minimum(indices, highest).astype(np.intp)
    else:
        wide = indices.astype(np.int64)
        fixed = np.where(wide < 0, wide + size, wide)
        np.clip(fixed, 0, highest, out=fixed)
    if out_of_bounds == "error" and out_of_range.any():
        position = tuple(int(i) for i in np.argwhere(out_of_range)[0])
        valid = f"[0, {size - 1}]" if indices.dtype.kind == "u" else f"[{-size}, {size - 1}]"
        raise GatherError(
            f"{op}: index {indices[position]} at indices position {position} is out of bounds for an axis "
            f"of size {size} (valid range {valid})"
        )
    return fixed.astype(np.intp, copy=False), out_of_range


def _out_of_range(indices: np.ndarray, size: int) -> np.ndarray:
    """Where an index lies outside ``[-size, size)`` (outside ``[0, size)`` for unsigned types)."""
    if indices.dtype.kind == "u":
        return indices >= size
    wide = indices.astype(np.int64, copy=False)
    return (wide < -size) | (wide >= size)


def count_out_of_bounds(indices: np.ndarray, size: int) -> int:
    """How many index values lie outside ``[-size, size)`` (outside ``[0, size)`` for unsigned types)."""
    return int(np.count_nonzero(_out_of_range(indices, size)))


def _readable(source: np.ndarray, axis: int) -> np.ndarray:
    """``source``, or where its axis is empty a single zero slice, so that clamped reads return 0."""
    if source.shape[axis] > 0:
        return source
    return np.zeros((*source.shape[:axis], 1, *source.shape[axis + 1 :]), source.dtype)


def dml_gather(
    input: np.ndarray,
    indices: np.ndarray,
    axis: int,
    index_dimensions: int,
    out_of_bounds: str = "directml",
) -> np.ndarray:
    """DML_GATHER: ``out[p..., q..., s...] = input[p..., fix(indices[q...]), s...]`` (docs/semantics.md section 2).

    ``input`` and ``indices`` have the same dimension count N (1 to 8); the output has N dimensions
    and the input's type.
    """
    input, indices = np.asarray(input), np.asarray(indices)
    output_sizes = validate_gather(input, indices, axis, index_dimensions, out_of_bounds)
    return gather_validated(input, indices, axis, index_dimensions, out_of_bounds, output_sizes)


def validate_gather(
    input: np.ndarray, indices: np.ndarray, axis: int, index_dimensions: int, out_of_bounds: str
) -> tuple[int, ...]:
    """DML_GATHER's output sizes; a GatherError where DirectML refuses the types, shapes or attributes."""
    check_types("DmlGather", input.dtype, indices.dtype)
    output_sizes = gather_output_sizes(input.shape, indices.shape, axis, index_dimensions)
    check_out_of_bounds("DmlGather", out_of_bounds)
    return output_sizes


def gather_validated(
    input: np.ndarray,
    indices: np.ndarray,
    axis: int,
    index_dimensions: int,
    out_of_bounds: str,
    output_sizes: tuple[int, ...],
) -> np.ndarray:
    """``dml_gather`` on arrays and attributes ``validate_gather`` accepted (its ``output_sizes``)."""
    index_shape = indices.shape[input.ndim - index_dimensions :]
    if not plain_gather(input.shape, indices.shape, axis, index_dimensions):
        if not out_of_bounds.startswith("directml"):
            raise GatherError(
                f"DmlGather: indices {indices.shape} and input {input.shape} along axis {axis} with "
                f"index_dimensions {index_dimensions}: only out_of_bounds=directml reads such a desc, as "
                "DirectML does (docs/semantics.md section 8)"
            )
        return directml_desc_gather(input, indices, axis, index_dimensions, output_sizes, out_of_bounds)
    if out_of_bounds.startswith("directml"):
        words = axis_words(indices.reshape(1, -1, 1), input.shape[axis])
        read = directml_read(input, axis, words, element_size(input, out_of_bounds))
        return read.reshape(output_sizes)
    fixed, out_of_range = fix_indices("DmlGather", indices, input.shape[axis], out_of_bounds)
    fixed, out_of_range = fixed.reshape(index_shape), out_of_range.reshape(index_shape)
    # Gather along a leading axis, so that the index mask selects whole slices, then move the index
    # dimensions to where the axis was.
    gathered = np.asarray(np.take(np.moveaxis(_readable(input, axis), axis, 0), fixed, axis=0))
    if out_of_bounds == "zero":
        gathered[out_of_range] = 0
    k = len(index_shape)
    result = np.moveaxis(gathered, tuple(range(k)), tuple(range(axis, axis + k)))
    return np.ascontiguousarray(result).reshape(output_sizes)


def dml_gather_elements(
    input: np.ndarray,
    indices: np.ndarray,
    axis: int,
    out_of_bounds: str = "directml",
) -> np.ndarray:
    """DML_GATHER_ELEMENTS: ``out[i, j, k] = input[i, fix(indices[i, j, k]), k]`` for axis 1 (docs/semantics.md, 3).

    ``indices`` has the input's sizes on every dimension except ``axis``; the output has the
    indices' sizes and the input's type.
    """
    input, indices = np.asarray(input), np.asarray(indices)
    validate_gather_elements(input, indices, axis, out_of_bounds)
    return gather_elements_validated(input, indices, axis, out_of_bounds)


def validate_gather_elements(input: np.ndarray, indices: np.ndarray, axis: int, out_of_bounds: str) -> None:
    """A GatherError where DirectML refuses DML_GATHER_ELEMENTS's types, shapes or attributes."""
    check_types("DmlGatherElements", input.dtype, indices.dtype)
    _taken("DmlGatherElements", gather_elements_sizes(input.shape, indices.shape, {"axis": axis}))
    check_out_of_bounds("DmlGatherElements", out_of_bounds)


def gather_elements_validated(input: np.ndarray, indices: np.ndarray, axis: int, out_of_bounds: str) -> np.ndarray:
    """``dml_gather_elements`` on arrays and attributes ``validate_gather_elements`` accepted."""
    if out_of_bounds.startswith("directml"):
        outer = int(np.prod(input.shape[:axis], dtype=np.int64))
        words = axis_words(indices.reshape(outer, indices.shape[axis], -1), input.shape[axis])
        return directml_read(input, axis, words, element_size(input, out_of_bounds)).reshape(indices.shape)
    fixed, out_of_range = fix_indices("DmlGatherElements", indices, input.shape[axis], out_of_bounds)
    result = np.take_along_axis(_readable(input, axis), fixed, axis)
    if out_of_bounds == "zero":
        result[out_of_range] = 0
    return result


def gather_nd_output_sizes(
    input_sizes: Sequence[int],
    indices_sizes: Sequence[int],
    input_dimension_count: int,
    indices_dimension_count: int,
    batch_dimension_count: int,
) -> tuple[int, ...]:
    """The output sizes of DML_GATHER_ND1 (``core.sizes.gather_nd_sizes``); a GatherError where DirectML refuses the
    shapes and attributes (docs/semantics.md section 3b)."""
    attributes = {
        "input_dimension_count": input_dimension_count,
        "indices_dimension_count": indices_dimension_count,
        "batch_dimension_count": batch_dimension_count,
    }
    return _taken("DmlGatherNd", gather_nd_sizes(input_sizes, indices_sizes, attributes))


def _tuple_view(
    input: np.ndarray, indices: np.ndarray, input_dimension_count: int, indices_dimension_count: int, batch: int
) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """The input as (B, T..., inner) and the index tuples as (B, M, k): B the batch, T the tuple dims."""
    data = input.shape[input.ndim - input_dimension_count :]
    index = indices.shape[indices.ndim - indices_dimension_count :]
    k = index[-1]
    tuple_dims = data[batch : batch + k]
    batches = int(np.prod(data[:batch], dtype=np.int64))
    inner = int(np.prod(data[batch + k :], dtype=np.int64))
    return input.reshape(batches, *tuple_dims, inner), indices.reshape(batches, -1, k), tuple_dims


def count_out_of_bounds_nd(
    input: np.ndarray, indices: np.ndarray, input_dimension_count: int, indices_dimension_count: int, batch: int
) -> int:
    """How many coordinates of the index tuples lie outside ``[-size, size)`` of their dimension."""
    _, tuples, dims = _tuple_view(input, indices, input_dimension_count, indices_dimension_count, batch)
    return sum(count_out_of_bounds(tuples[..., j], size) for j, size in enumerate(dims))


def dml_gather_nd(
    input: np.ndarray,
    indices: np.ndarray,
    input_dimension_count: int,
    indices_dimension_count: int,
    batch_dimension_count: int,
    out_of_bounds: str = "directml",
) -> np.ndarray:
    """DML_GATHER_ND1: ``out[b..., i..., s...] = input[b..., fix(indices[b..., i..., :]), s...]`` (section 3b).

    ``input`` and ``indices`` have the same dimension count N (1 to 8); the output has N dimensions and the input's
    type. ``batch_dimension_count`` 0 is DML_GATHER_ND.
    """
    input, indices = np.asarray(input), np.asarray(indices)
    counts = (input_dimension_count, indices_dimension_count, batch_dimension_count)
    output_sizes = validate_gather_nd(input, indices, *counts, out_of_bounds)
    return gather_nd_validated(input, indices, *counts, out_of_bounds, output_sizes)


def validate_gather_nd(
    input: np.ndarray,
    indices: np.ndarray,
    input_dimension_count: int,
    indices_dimension_count: int,
    batch_dimension_count: int,
    out_of_bounds: str,
) -> tuple[int, ...]:
    """DML_GATHER_ND1's output sizes; a GatherError where DirectML refuses the types, shapes or attributes."""
    counts = (input_dimension_count, indices_dimension_count, batch_dimension_count)
    check_types("DmlGatherNd", input.dtype, indices.dtype)
    output_sizes = gather_nd_output_sizes(input.shape, indices.shape, *counts)
    check_out_of_bounds("DmlGatherNd", out_of_bounds)
    return output_sizes


def gather_nd_validated(
    input: np.ndarray,
    indices: np.ndarray,
    input_dimension_count: int,
    indices_dimension_count: int,
    batch_dimension_count: int,
    out_of_bounds: str,
    output_sizes: tuple[int, ...],
) -> np.ndarray:
    """``dml_gather_nd`` on arrays and attributes ``validate_gather_nd`` accepted (its ``output_sizes``)."""
    op = "DmlGatherNd"
    if out_of_bounds.startswith("directml"):
        return directml_gather_nd(
            input,
            indices,
            input_dimension_count,
            indices_dimension_count,
            batch_dimension_count,
            element_size(input, out_of_bounds),
        ).reshape(output_sizes)
    data = input.shape[input.ndim - input_dimension_count :]
    index = indices.shape[indices.ndim - indices_dimension_count :]
    if data[:batch_dimension_count] != index[:batch_dimension_count]:
        raise GatherError(
            f"{op}: the batch sizes differ (input {data[:batch_dimension_count]}, indices "
            f"{index[:batch_dimension_count]}): only out_of_bounds=directml reads such a desc, as "
            "DirectML does"
        )
    view, tuples, dims = _tuple_view(
        input, indices, input_dimension_count, indices_dimension_count, batch_dimension_count
    )
    batches, inner = view.shape[0], view.shape[-1]
    fixed, outside = zip(*(fix_indices(op, tuples[..., j], size, "clamp") for j, size in enumerate(dims)), strict=True)
    if out_of_bounds == "error" and any(o.any() for o in outside):
        j = next(j for j, o in enumerate(outside) if o.any())
        tuple_at = np.unravel_index(int(np.flatnonzero(outside[j])[0]), indices.shape[:-1])
        position = (*(int(p) for p in tuple_at), j)
        size = dims[j]
        raise GatherError(
            f"{op}: index {indices[position]} at indices position {position} is out of bounds for input dimension "
            f"{input.ndim - input_dimension_count + batch_dimension_count + j} of size {size} (valid range "
            f"{f'[0, {size - 1}]' if indices.dtype.kind == 'u' else f'[{-size}, {size - 1}]'})"
        )
    batch_ids = np.arange(batches).reshape(-1, 1)
    if 0 in view.shape[1:-1]:  # an empty tuple dimension: nothing to read; clamped reads give 0
        result = np.zeros((*tuples.shape[:2], inner), input.dtype)
    else:
        result = np.asarray(view[(batch_ids, *fixed)])
    if out_of_bounds == "zero":
        result[np.any(outside, axis=0)] = 0
    return result.reshape(output_sizes)
