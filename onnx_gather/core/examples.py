"""The worked examples of DirectML's documentation (docs/semantics.md, sections 2, 3 and 3b), as data."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Example:
    """One worked example: an operator, its attributes, its tensors and the documented output."""

    title: str
    op_type: str
    attributes: dict[str, int]
    input: np.ndarray
    indices: np.ndarray
    output: np.ndarray = field(repr=False)


def _f32(values: list) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def _u32(values: list) -> np.ndarray:
    return np.array(values, dtype=np.uint32)


# Every example uses FLOAT32 data and UINT32 indices. The GatherElements page gives its output the
# type UINT32; DirectML requires the output type to equal the input type, so it is FLOAT32 here.
EXAMPLES = (
    Example(
        "DML_GATHER example 1: 1D remapping",
        "DmlGather",
        {"axis": 0, "index_dimensions": 1},
        _f32([11, 12, 13, 14]),
        _u32([3, 1, 3, 0, 2]),
        _f32([14, 12, 14, 11, 13]),
    ),
    Example(
        "DML_GATHER example 2: 2D output, 1D indices, axis 0, concatenate rows",
        "DmlGather",
        {"axis": 0, "index_dimensions": 1},
        _f32([[1, 2], [3, 4], [5, 6]]),
        _u32([[0, 1, 1, 2]]),
        _f32([[1, 2], [3, 4], [3, 4], [5, 6]]),
    ),
    Example(
        # As printed (input {3,2}, indices {1,2}, output {3,2}) DirectML refuses it: it keeps the last N sizes of
        # C = {3,1,2}. With a leading 1 on every tensor it takes it and gives the page's values.
        "DML_GATHER example 3: axis 1 of {3,2} (with a leading 1), swap columns",
        "DmlGather",
        {"axis": 2, "index_dimensions": 2},
        _f32([[[1, 2], [3, 4], [5, 6]]]),
        _u32([[[1, 0]]]),
        _f32([[[2, 1]], [[4, 3]], [[6, 5]]]),
    ),
    Example(
        "DML_GATHER example 4: nested indices on the last axis",
        "DmlGather",
        {"axis": 2, "index_dimensions": 2},
        _f32([[[1, 2, 3], [4, 5, 6], [7, 8, 9]]]),
        _u32([[[0, 2]]]),
        _f32([[[1, 3]], [[4, 6]], [[7, 9]]]),
    ),
    Example(
        "DML_GATHER example 5: nested indices on a middle axis",
        "DmlGather",
        {"axis": 1, "index_dimensions": 2},
        _f32([[[1, 2], [3, 4], [5, 6]]]),
        _u32([[[0, 1], [1, 2]]]),
        _f32([[[1, 2], [3, 4]], [[3, 4], [5, 6]]]),
    ),
    Example(
        "DML_GATHER_ELEMENTS example: axis 0",
        "DmlGatherElements",
        {"axis": 0},
        _f32([[1, 2, 3], [4, 5, 6], [7, 8, 9]]),
        _u32([[1, 2, 0], [2, 0, 0]]),
        _f32([[4, 8, 3], [7, 2, 3]]),
    ),
    Example(
        "DML_GATHER_ND1 example 1: 1D remapping",
        "DmlGatherNd",
        {"input_dimension_count": 2, "indices_dimension_count": 2, "batch_dimension_count": 0},
        _f32([[0, 1], [2, 3]]),
        _u32([[1], [0]]),
        _f32([[2, 3], [0, 1]]),
    ),
    Example(
        "DML_GATHER_ND1 example 2: 2D remapping with batch count",
        "DmlGatherNd",
        {"input_dimension_count": 3, "indices_dimension_count": 3, "batch_dimension_count": 1},
        _f32([[[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[8, 9], [10, 11]]]]),
        _u32([[[[0, 0], [1, 1]], [[1, 1], [0, 0]], [[0, 1], [1, 0]]]]),
        _f32([[[[0, 3], [7, 4], [9, 10]]]]),
    ),
)
