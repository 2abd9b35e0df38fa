"""onnx_gather.semantics: DirectML's rules in numpy, without a runtime."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_identical

from onnx_gather import semantics
from onnx_gather.examples import EXAMPLES
from onnx_gather.semantics import GatherError, dml_gather, dml_gather_elements, gather_output_sizes


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.title)
def test_documented_example(example):
    if example.op_type == "DmlGather":
        output = dml_gather(example.input, example.indices, **example.attributes)
    else:
        output = dml_gather_elements(example.input, example.indices, **example.attributes)
    assert_identical(output, example.output)


def test_openvino_gather_1_example_has_the_documented_output_shape():
    # OpenVINO Gather-1: data {6,12,10,24}, indices {15,4,20,28}, axis 1, in DML form with N = 7.
    sizes = gather_output_sizes((1, 1, 1, 6, 12, 10, 24), (1, 1, 1, 15, 4, 20, 28), axis=4, index_dimensions=4)
    assert sizes == (6, 15, 4, 20, 28, 10, 24)


def test_output_sizes_remove_ones_from_the_left_even_past_a_larger_size():
    # Example 3: C = {3,1,2} is cropped to {3,2}.
    assert gather_output_sizes((3, 2), (1, 2), axis=1, index_dimensions=2) == (3, 2)


def test_output_sizes_are_padded_with_leading_ones():
    assert gather_output_sizes((1, 1, 5, 4), (1, 1, 1, 1), axis=2, index_dimensions=0) == (1, 1, 1, 4)


def test_scalar_indices_gather_one_slice():
    data = np.arange(12, dtype=np.int32).reshape(3, 4)
    assert_identical(
        dml_gather(data, np.array([[2]]), axis=0, index_dimensions=0), np.array([[8, 9, 10, 11]], np.int32)
    )


def test_negative_indices_count_from_the_end():
    data = np.arange(5, dtype=np.int16)
    assert_identical(dml_gather(data, np.array([-1, -5, 0]), axis=0, index_dimensions=1), np.array([4, 0, 0], np.int16))
    assert_identical(dml_gather_elements(data, np.array([-2, 3]), axis=0), np.array([3, 3], np.int16))


OUT_OF_BOUNDS = np.array([7, -7, 5, -6, 2], np.int64)  # size 6: 7 and -7 are out of bounds


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("clamp", [15, 10, 15, 10, 12]), ("zero", [0, 0, 15, 10, 12])],
)
def test_out_of_bounds_modes_for_gather_elements(mode, expected):
    data = np.arange(10, 16, dtype=np.float32)
    output = dml_gather_elements(data, OUT_OF_BOUNDS, axis=0, out_of_bounds=mode)
    assert_identical(output, np.array(expected, np.float32))


def test_clamp_follows_the_webnn_conformance_case():
    # WebNN conformance: GatherElements of a 6-element input at index 7 returns the last element.
    data = np.array([1, 2, 3, 4, 5, 6], np.float32)
    assert_identical(dml_gather_elements(data, np.array([7], np.int32), axis=0), np.array([6], np.float32))


def test_zero_mode_zeroes_whole_gather_slices():
    data = np.arange(6, dtype=np.uint8).reshape(3, 2)
    output = dml_gather(data, np.array([[1, 3, -4]]), axis=0, index_dimensions=1, out_of_bounds="zero")
    assert_identical(output, np.array([[2, 3], [0, 0], [0, 0]], np.uint8))


def test_clamp_mode_clamps_whole_gather_slices():
    data = np.arange(6, dtype=np.uint8).reshape(3, 2)
    output = dml_gather(data, np.array([[1, 3, -4]]), axis=0, index_dimensions=1, out_of_bounds="clamp")
    assert_identical(output, np.array([[2, 3], [4, 5], [0, 1]], np.uint8))


def test_error_mode_names_value_position_and_range():
    data = np.zeros((2, 6), np.float64)
    with pytest.raises(
        GatherError, match=r"^DmlGather: index -7 at indices position \(0, 1\) .* size 6 \(valid range \[-6, 5\]\)$"
    ):
        dml_gather(data, np.array([[0, -7]]), axis=1, index_dimensions=1, out_of_bounds="error")


def test_error_mode_accepts_in_bounds_indices():
    data = np.arange(6, dtype=np.int8)
    assert_identical(
        dml_gather_elements(data, np.array([5, -6]), axis=0, out_of_bounds="error"), np.array([5, 0], np.int8)
    )


UNSIGNED_HUGE = np.array([2**63 + 5, 1, 2**64 - 1], np.uint64)


@pytest.mark.parametrize(("mode", "expected"), [("clamp", [3, 1, 3]), ("zero", [0, 1, 0])])
def test_unsigned_gather_indices_above_2_63_are_out_of_bounds_never_negative(mode, expected):
    output = dml_gather(np.arange(4, dtype=np.int64), UNSIGNED_HUGE, 0, 1, out_of_bounds=mode)
    assert_identical(output, np.array(expected, np.int64))


@pytest.mark.parametrize(("mode", "expected"), [("clamp", [2, 1, 2]), ("zero", [0, 1, 0])])
def test_unsigned_gather_elements_indices_above_2_63_are_out_of_bounds_never_negative(mode, expected):
    output = dml_gather_elements(np.arange(3, dtype=np.int64), UNSIGNED_HUGE, 0, out_of_bounds=mode)
    assert_identical(output, np.array(expected, np.int64))


def test_unsigned_index_above_2_63_in_error_mode_reports_its_unsigned_value():
    with pytest.raises(
        GatherError, match=r"index 9223372036854775813 at indices position \(0,\) .* \(valid range \[0, 3\]\)"
    ):
        dml_gather(np.arange(4.0), UNSIGNED_HUGE, 0, 1, out_of_bounds="error")


@pytest.mark.parametrize("mode", ["clamp", "zero"])
def test_an_empty_axis_reads_zeros(mode):
    output = dml_gather(np.zeros((2, 0), np.int32), np.array([[3, -1]]), axis=1, index_dimensions=1, out_of_bounds=mode)
    assert_identical(output, np.zeros((2, 2), np.int32))


def test_gather_never_writes_its_input():
    data = np.arange(4, dtype=np.int32)
    dml_gather(data, np.array([9]), axis=0, index_dimensions=0, out_of_bounds="zero")
    assert_identical(data, np.arange(4, dtype=np.int32))


# Every validation error: (callable, the message it must match).
VALIDATION_ERRORS = {
    "ranks differ": (
        lambda: dml_gather(np.zeros((2, 3)), np.zeros(2, np.int64), 0, 1),
        r"input has 2 dimensions \(2, 3\) but indices has 1 \(2,\)",
    ),
    "more than 8 dimensions": (
        lambda: dml_gather(np.zeros((1,) * 9), np.zeros((1,) * 9, np.int64), 0, 1),
        r"dimension count 9 is outside DirectML's range 1 to 8",
    ),
    "no dimensions": (
        lambda: dml_gather_elements(np.zeros(()), np.zeros((), np.int64), 0),
        r"dimension count 0 is outside",
    ),
    "axis out of range": (
        lambda: dml_gather(np.zeros((2, 3)), np.zeros((1, 2), np.int64), 2, 1),
        r"^DmlGather: axis 2 is out of range \[0, 2\)",
    ),
    "negative axis": (
        lambda: dml_gather_elements(np.zeros((2, 3)), np.zeros((2, 3), np.int64), -1),
        r"^DmlGatherElements: axis -1 is out of range \[0, 2\)",
    ),
    "index_dimensions out of range": (
        lambda: dml_gather(np.zeros((2, 3)), np.zeros((1, 2), np.int64), 0, 3),
        r"index_dimensions 3 is out of range \[0, 2\]",
    ),
    "leading index sizes not 1": (
        lambda: dml_gather(np.zeros((2, 3)), np.zeros((2, 2), np.int64), 0, 1),
        r"leading sizes \(2,\); the 1 irrelevant leading sizes must be 1",
    ),
    "output cannot be cropped": (
        lambda: dml_gather(np.zeros((2, 3)), np.zeros((2, 2), np.int64), 0, 2),
        r"output sizes \(2, 2, 3\) have 3 dimensions and no 1 to remove",
    ),
    "gather elements sizes differ off the axis": (
        lambda: dml_gather_elements(np.zeros((2, 3)), np.zeros((2, 2), np.int64), 0),
        r"on dimension 1 \(2 != 3\); they must be equal except on axis 0",
    ),
    "unsupported data type": (
        lambda: dml_gather(np.zeros(3, bool), np.zeros(1, np.int64), 0, 1),
        r"input type bool is not supported",
    ),
    "unsupported index type": (
        lambda: dml_gather_elements(np.zeros(3), np.zeros(3, np.int16), 0),
        r"indices type int16 is not supported",
    ),
    "unknown out_of_bounds mode": (
        lambda: dml_gather(np.zeros(3), np.zeros(1, np.int64), 0, 1, out_of_bounds="wrap"),
        r"out_of_bounds 'wrap' is unknown \(expected one of: directml, clamp, zero, error\)",
    ),
    "out of bounds in error mode": (
        lambda: dml_gather_elements(np.zeros(3), np.array([0, 3]), 0, out_of_bounds="error"),
        r"index 3 at indices position \(1,\) is out of bounds",
    ),
}


@pytest.mark.parametrize("case", VALIDATION_ERRORS, ids=str)
def test_validation_error(case):
    call, message = VALIDATION_ERRORS[case]
    with pytest.raises(GatherError, match=message):
        call()


def test_semantics_does_not_import_onnxruntime():
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(semantics))
    imported = {
        alias.name for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom) for alias in node.names
    }
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert not any(name.startswith("onnxruntime") for name in imported)
