"""DirectML's scatters in numpy (onnx_gather.core.scatter): the pages' examples and what DirectML 1.15.4 was measured
to do (docs/semantics.md section 10), without DirectML."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_gather.core.scatter import ScatterError, dml_scatter_elements, dml_scatter_nd

ROWS = np.arange(18, dtype=np.float32).reshape(3, 6)


def test_the_pages_example():
    out = dml_scatter_elements(
        np.arange(5, dtype=np.float32), np.array([3, 1, 3, 0], np.uint32), np.float32([5, 6, 7, 8]), 0
    )
    assert out.tolist() == [8, 6, 2, 7, 4]


@pytest.mark.parametrize(
    ("index", "dtype", "written"),
    [
        (7, np.int32, 13),  # just past row 1: into row 2
        (11, np.int64, 17),
        (12, np.int64, None),  # past the tensor: dropped
        (-1, np.int32, 11),
        (-7, np.int32, 5),  # 6 + (2^32 - 7 + 6) wraps to 5: row 0
        (-13, np.int64, None),
        (2**31 - 1, np.int32, None),
        (2**32 + 1, np.int64, 7),  # the low 32 bits
        (2**32 - 1, np.int64, 5),
        (-(2**32) + 1, np.int64, 13),  # low word 1, negative: 1 + 6
        (2**32 - 1, np.uint32, 5),  # UINT32 is never negative
        (2**64 - 1, np.uint64, 11),  # UINT64 with its top bit set counts from the end
    ],
)
def test_an_index_of_row_1_writes_at_its_linear_offset(index, dtype, written):
    indices = np.array([[0], [index], [0]], dtype=np.uint64 if dtype == np.uint64 else np.int64).astype(dtype)
    out = dml_scatter_elements(ROWS, indices, np.array([[100], [101], [102]], np.float32), 1)
    expected = ROWS.copy().ravel()
    expected[[0, 12]] = [100, 102]
    if written is not None:
        expected[written] = 101
    assert out.ravel().tolist() == expected.tolist()


@pytest.mark.parametrize(
    ("tuple_", "written"), [((0, 6), 6), ((1, -7), 5), ((-1, 6), None), ((3, 0), None), ((0, 2**32 + 1), 1)]
)
def test_scatter_nd_writes_each_tuple_at_its_linear_offset(tuple_, written):
    out = dml_scatter_nd(ROWS, np.array([tuple_]), np.array([[100]], np.float32), 2, 2)
    expected = ROWS.copy().ravel()
    if written is not None:
        expected[written] = 100
    assert out.ravel().tolist() == expected.tolist()


def test_offsets_wrap_at_2_to_the_32():
    data = np.zeros((2, 1 << 21), np.uint8)
    indices = np.zeros((1, 1 << 21), np.int64)
    indices[0, 5:8] = [2048, 2049, 2050]  # 2048 * 2^21 = 2^32: row 0; 2050 wraps past the tensor
    updates = np.zeros((1, 1 << 21), np.uint8)
    updates[0, 5:8] = [100, 101, 102]
    out = dml_scatter_elements(data, indices, updates, 0).ravel()
    assert np.flatnonzero(out).tolist() == [5, (1 << 21) + 6]


def test_an_axis_of_size_1_takes_any_index_as_0():
    out = dml_scatter_elements(np.zeros((2, 1), np.float32), np.array([[0], [1]]), np.array([[1], [2]], np.float32), 1)
    assert out.ravel().tolist() == [1, 2]


def test_scatter_nd_rows_and_leading_ones():
    out = dml_scatter_nd(ROWS, np.array([[2], [0]]), np.full((2, 6), 7, np.float32), 2, 2)
    assert out[0].tolist() == [7] * 6 and out[2].tolist() == [7] * 6 and out[1].tolist() == ROWS[1].tolist()
    padded = dml_scatter_nd(ROWS.reshape(1, 3, 6), np.array([[[1, 1]]]), np.array([[[9]]], np.float32), 2, 3)
    assert padded.ravel()[7] == 9


def test_duplicates_the_last_wins_or_an_error():
    indices, updates = np.array([1, 1, 1]), np.array([1, 2, 3], np.float32)
    assert dml_scatter_elements(np.zeros(4, np.float32), indices, updates, 0).tolist() == [0, 3, 0, 0]
    with pytest.raises(ScatterError, match="race"):
        dml_scatter_elements(np.zeros(4, np.float32), indices, updates, 0, duplicates="error")
    same = dml_scatter_elements(np.zeros(4, np.float32), indices, np.full(3, 5, np.float32), 0, duplicates="error")
    assert same.tolist() == [0, 5, 0, 0]
    # an index just past row 1 writes row 2's element: a duplicate too
    with pytest.raises(ScatterError, match="element 12"):
        dml_scatter_elements(ROWS, np.array([[0], [6], [0]]), np.float32([[1], [2], [3]]), 1, duplicates="error")


def test_the_other_modes():
    data, updates = np.zeros(4, np.float32), np.array([1, 2], np.float32)
    assert dml_scatter_elements(data, np.array([1, 9]), updates, 0, out_of_bounds="clamp").tolist() == [0, 1, 0, 2]
    with pytest.raises(ScatterError, match="index 9 at indices position"):
        dml_scatter_elements(data, np.array([1, 9]), updates, 0, out_of_bounds="error")
    with pytest.raises(ScatterError, match="out of bounds"):
        dml_scatter_nd(ROWS, np.array([[3, 0]]), np.array([[1]], np.float32), 2, 2, out_of_bounds="error")
    with pytest.raises(ScatterError, match="unknown"):
        dml_scatter_elements(data, np.array([1, 2]), updates, 0, out_of_bounds="zero")


@pytest.mark.parametrize(
    ("indices", "updates", "axis"),
    [
        (np.zeros((2, 4), np.int64), np.zeros((2, 4), np.float32), 1),  # larger than the input on the axis
        (np.zeros((1, 3), np.int64), np.zeros((1, 3), np.float32), 1),  # smaller off the axis
        (np.zeros((2, 2), np.int64), np.zeros((2, 1), np.float32), 1),  # updates unlike the indices
        (np.zeros((2, 3), np.int16), np.zeros((2, 3), np.float32), 1),  # an index type DirectML does not take
        (np.zeros((2, 3), np.int64), np.zeros((2, 3), np.float16), 1),  # updates of another type
        (np.zeros((2, 3), np.int64), np.zeros((2, 3), np.float32), 2),  # axis past N
    ],
)
def test_what_directml_refuses(indices, updates, axis):
    with pytest.raises(ScatterError):
        dml_scatter_elements(np.zeros((2, 3), np.float32), indices, updates, axis)


@pytest.mark.parametrize(
    ("indices", "updates", "counts"),
    [
        (np.zeros((4, 3)), np.zeros((1, 4)), (2, 2)),  # a tuple longer than the input's rank
        (np.zeros((4, 1)), np.zeros((4, 2)), (2, 2)),  # updates not indices[:-1] + input[k:]
        (np.zeros((1, 2)), np.zeros((1, 1)), (2, 0)),  # no indices dimension counted
        (np.zeros((4, 1)), np.zeros((4, 3)), (1, 2)),  # an input size that is not 1 outside the count
    ],
)
def test_what_directml_refuses_nd(indices, updates, counts):
    with pytest.raises(ScatterError):
        dml_scatter_nd(np.zeros((2, 3), np.float32), indices.astype(np.int64), updates.astype(np.float32), *counts)


def test_a_scatter_nd_of_empty_indices_gives_zeros_as_directmls_provider_leaves_it_unwritten():
    data = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    out = dml_scatter_nd(data, np.zeros((0, 1), np.int64), np.zeros((0, 3), np.float32), 2, 2)
    assert out.tolist() == [[0, 0, 0], [0, 0, 0]] and data[0, 0] == 1
    elements = dml_scatter_elements(data, np.zeros((0, 3), np.int64), np.zeros((0, 3), np.float32), 0)
    assert elements.tolist() == data.tolist()  # measured: a ScatterElements of empty indices gives the input
