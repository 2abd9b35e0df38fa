"""onnx_gather.core.semantics: DirectML's rules in numpy, without a runtime."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_identical

from onnx_gather.core import semantics
from onnx_gather.core.examples import EXAMPLES
from onnx_gather.core.semantics import GatherError, dml_gather, dml_gather_elements, dml_gather_nd, gather_output_sizes


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.title)
def test_documented_example(example):
    function = {"DmlGather": dml_gather, "DmlGatherElements": dml_gather_elements, "DmlGatherNd": dml_gather_nd}
    output = function[example.op_type](example.input, example.indices, **example.attributes)
    assert_identical(output, example.output)


ND_DATA = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        # Tuple (0, 5) past the end of its row of 4: DirectML reads on, at offset 0 * 4 + 5, into the next row.
        ("directml", [[5.0, 11.0], [15.0, 12.0]]),
        ("clamp", [[3.0, 11.0], [20.0, 12.0]]),
        ("zero", [[0.0, 11.0], [0.0, 12.0]]),
    ],
)
def test_gather_nd_out_of_bounds_modes(mode, expected):
    # Batch dim 1 (size 2), tuples of 2 into (3, 4): the second batch's (2, -9) wraps around to
    # (12 + 2 * 4 + (2^32 - 9 + 4)) mod 2^32 = 15; clamped per coordinate, it is (2, -4): 20.
    indices = np.array([[[0, 5], [2, 3]], [[2, -9], [0, 0]]], np.int64)
    output = dml_gather_nd(ND_DATA, indices, 3, 3, 1, mode)
    assert_identical(output, np.array([expected], np.float32))


def test_gather_nd_error_mode_names_the_coordinate_and_its_dimension():
    indices = np.array([[[0, 1], [2, -5]]], np.int64)
    with pytest.raises(
        GatherError,
        match=r"index -5 at indices position \(0, 1, 1\) is out of bounds for input "
        r"dimension 2 of size 4 \(valid range \[-4, 3\]\)$",
    ):
        dml_gather_nd(ND_DATA[:1], indices, 3, 3, 1, "error")


def test_gather_nd_sizes_are_right_aligned_with_leading_ones():
    assert semantics.gather_nd_output_sizes((1, 1, 3, 4), (1, 1, 5, 1), 2, 2, 0) == (1, 1, 5, 4)
    assert semantics.gather_nd_output_sizes((3, 4, 5, 6, 7), (1, 1, 1, 2, 3), 5, 3, 0) == (1, 1, 2, 6, 7)
    assert semantics.gather_nd_output_sizes((3, 4), (1, 2), 2, 1, 0) == (1, 1)  # a scalar, padded


def test_openvino_gather_1_example_has_the_documented_output_shape():
    # OpenVINO Gather-1: data {6,12,10,24}, indices {15,4,20,28}, axis 1, in DML form with N = 7.
    sizes = gather_output_sizes((1, 1, 1, 6, 12, 10, 24), (1, 1, 1, 15, 4, 20, 28), axis=4, index_dimensions=4)
    assert sizes == (6, 15, 4, 20, 28, 10, 24)


def test_output_sizes_keep_the_last_n_of_c_whatever_they_crop():
    # DirectML keeps the last N entries of C: the input's leading 1s go (ONNX Runtime's provider makes such descs).
    assert gather_output_sizes((1, 3, 2), (1, 1, 2), axis=2, index_dimensions=2) == (3, 1, 2)
    # Example 3 as printed: C = {3,1,2}; DirectML takes {1,2} (measured), the cropped coordinate read as 0.
    assert gather_output_sizes((3, 2), (1, 2), axis=1, index_dimensions=2) == (1, 2)
    example = np.array([[1, 2], [3, 4], [5, 6]], np.float32)
    assert_identical(dml_gather(example, np.array([[1, 0]], np.uint32), 1, 2), np.array([[2, 1]], np.float32))


def test_leading_index_sizes_take_the_output_dimensions_that_are_not_1_in_order():
    # DirectML's issue 685 (input {3,3}, indices {3,2}, axis 1): row r reads its index row r. Measured: [[0,1],[5,3],
    # [7,8]] for input 0..8 and indices [[0,1],[2,0],[1,2]].
    data = np.arange(9, dtype=np.float32).reshape(3, 3)
    indices = np.array([[0, 1], [2, 0], [1, 2]], np.uint32)
    assert_identical(dml_gather(data, indices, 1, 1), np.array([[0, 1], [5, 3], [7, 8]], np.float32))


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
    # WebNN conformance: GatherElements of a 6-element input at index 7 returns the last element; index 9 and -9
    # too (clamped into the axis, where DirectML's own reading of them differs).
    data = np.array([1, 2, 3, 4, 5, 6], np.float32)
    indices = np.array([7, 9, -9], np.int32)
    assert_identical(dml_gather_elements(data, indices, axis=0, out_of_bounds="clamp"), np.array([6, 6, 1], np.float32))
    assert dml_gather_elements(data, indices, axis=0).tolist() != [6, 6, 1]


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
    "leading index sizes DirectML is not safe on": (
        lambda: dml_gather(np.zeros((1, 1, 9)), np.zeros((1, 2, 2), np.int64), 2, 0),
        r"index sizes \(1, 2, 2\) before the last 0 that, without leading 1s, do not start the input's sizes before "
        r"axis 2, \(1, 1\): DirectML refuses most such descs, but takes some and its process then ends",
    ),
    "an output that crops index entries": (
        lambda: dml_gather(np.zeros((2, 3)), np.zeros((2, 2), np.int64), 0, 2),
        r"crops index entries of C \(index_dimensions 2 above axis 0 \+ 1\): DirectML takes it, then later operators",
    ),
    "a desc beyond ONNX's Gather in another mode than directml": (
        lambda: dml_gather(np.zeros((3, 3)), np.zeros((3, 2), np.int64), 1, 1, out_of_bounds="clamp"),
        r"only out_of_bounds=directml reads such a desc",
    ),
    "gather elements sizes differ off the axis": (
        lambda: dml_gather_elements(np.zeros((2, 3)), np.zeros((2, 2), np.int64), 0),
        r"on dimension 1 \(2 != 3\): DirectML refuses DML_GATHER_ELEMENTS unless they are equal off axis 0",
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
    "gather nd dimension count out of range": (
        lambda: dml_gather_nd(np.zeros((2, 3)), np.zeros((1, 2), np.int64), 3, 1, 0),
        r"^DmlGatherNd: input_dimension_count 3 is out of range \[1, 2\]",
    ),
    "gather nd leading input sizes not 1": (
        lambda: dml_gather_nd(np.zeros((2, 3)), np.zeros((1, 1), np.int64), 1, 1, 0),
        r"input sizes \(2, 3\) with input_dimension_count 1 have leading sizes \(2,\); the 1 irrelevant",
    ),
    "gather nd batch count out of range": (
        lambda: dml_gather_nd(np.zeros((2, 3)), np.zeros((2, 1), np.int64), 2, 2, 2),
        r"batch_dimension_count 2 is out of range \[0, 2\)",
    ),
    "gather nd batch sizes differ, outside the directml mode": (
        lambda: dml_gather_nd(np.zeros((2, 3)), np.zeros((3, 1), np.int64), 2, 2, 1, "clamp"),
        r"the batch sizes differ \(input \(2,\), indices \(3,\)\): only out_of_bounds=directml reads",
    ),
    "gather nd tuples too long": (
        lambda: dml_gather_nd(np.zeros((2, 3)), np.zeros((1, 3), np.int64), 2, 1, 0),
        r"index tuples of 3 coordinates \(the indices' last size\) do not fit the input's 2 dimensions",
    ),
    "gather nd empty tuples": (
        lambda: dml_gather_nd(np.zeros((2, 3)), np.zeros((4, 0), np.int64), 2, 2, 0),
        r"index tuples of 0 coordinates",
    ),
    "gather nd output too large for N": (
        lambda: dml_gather_nd(np.zeros((1, 3)), np.zeros((2, 2), np.int64), 1, 2, 0),
        r"index tuples of 2 coordinates|output sizes",
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


def test_directml_reads_gather_nd_batches_the_indices_have_and_the_input_lacks():
    # Measured on DirectML called directly: the indices' batch sizes rule the output; a batch past the input's reads
    # on in memory (batch 2 of an input of 2 batches: offset 2 * 3 + 1 = 7, clamped to the last element).
    data = np.arange(10, 16, dtype=np.float32).reshape(2, 3)
    assert dml_gather_nd(data, np.array([[2], [0], [1]], np.int32), 2, 2, 1).tolist() == [[12, 13, 15]]
    data = np.arange(10, 19, dtype=np.float32).reshape(3, 3)
    assert dml_gather_nd(data, np.array([[2], [0]], np.int32), 2, 2, 1).tolist() == [[12, 13]]


def test_directml_reads_a_uint64_index_with_its_top_bit_set_as_negative():
    data = np.arange(10, 18, dtype=np.float32).reshape(1, 8)
    indices = np.array([[2**64 - 2, 2**63 + 1, 2**32 + 1, 5]], np.uint64)
    assert dml_gather_elements(data, indices, 1).tolist() == [[16, 17, 11, 15]]
    unsigned32 = np.array([[2**32 - 2, 2**31 + 1, 1, 5]], np.uint32)  # never negative: clamped
    assert dml_gather_elements(data, unsigned32, 1).tolist() == [[17, 17, 11, 15]]


def test_the_core_imports_no_runtime():
    # In a fresh interpreter: every module of the core, graph and DirectML layers, and a conversion and a lowering
    # (ranks by symbolic inference, no run asked for), load neither onnxruntime nor onnxruntime-extensions (the
    # custom ops, the backends and a run to observe ranks do, when used).
    import subprocess
    import sys
    from pathlib import Path

    package = Path(__file__).resolve().parent.parent / "onnx_gather"
    modules = sorted(
        ".".join(p.relative_to(package.parent).with_suffix("").parts)
        for layer in ("core", "graphs", "directml")
        for p in (package / layer).rglob("*.py")
        if p.stem != "__init__"
    )
    code = (
        f"import sys, onnx_gather; import {', '.join(modules)}; "
        "from onnx_gather.graphs.emit import single_node_model; import numpy as np; "
        "m = single_node_model('Gather', np.float32, np.int64, domain='', axis=0); "
        "m.graph.input[0].type.tensor_type.shape.dim.add().dim_value = 3; "
        "m.graph.input[1].type.tensor_type.shape.dim.add().dim_value = 2; "
        "d = onnx_gather.to_dml(m); assert d.graph.node[0].op_type == 'DmlGather', d; onnx_gather.to_onnx(d); "
        "print(len(sys.argv), sorted(m for m in ('onnxruntime', 'onnxruntime_extensions') if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert len(modules) > 20
    assert loaded == "1 []"
