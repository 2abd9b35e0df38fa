"""DmlGather, DmlGatherElements and DmlGatherNd as custom ops inside ONNX Runtime."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap

import numpy as np
import onnxruntime
import pytest
from conftest import assert_identical, run_dml
from google.protobuf.internal import api_implementation

import onnx_gather
from onnx_gather.app.cli import main
from onnx_gather.app.demo import sample_model_path
from onnx_gather.core import contract
from onnx_gather.core.examples import EXAMPLES
from onnx_gather.core.semantics import GatherError
from onnx_gather.graphs.emit import single_node_model
from onnx_gather.runtime import ops


def test_the_processes_started_after_the_import_parse_with_this_process_s_protobuf():
    # onnxruntime-extensions sets PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python as ops imports it; ops undoes that.
    loaded = api_implementation.Type()  # this process's: upb, unless the user chose pure Python
    assert os.environ.get("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", loaded) == loaded


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.title)
def test_documented_example_in_onnxruntime(example):
    output = run_dml(example.op_type, example.input, example.indices, **example.attributes)
    assert_identical(output, example.output)


@pytest.mark.parametrize("index_dtype", contract.INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("data_dtype", ops.NODE_DTYPES, ids=str)
def test_every_data_and_index_type_is_registered(data_dtype, index_dtype):
    data = np.arange(12).astype(data_dtype).reshape(3, 4)
    indices = np.array([[2, 0, 1, 2]], index_dtype)
    gathered = run_dml("DmlGather", data, indices, axis=0, index_dimensions=1)
    assert_identical(gathered, data[[2, 0, 1, 2]])
    elements = run_dml("DmlGatherElements", data, indices, axis=0)
    assert_identical(elements, np.array([[8, 1, 6, 11]]).astype(data_dtype))
    tuples = np.array([[2, 3], [0, 1]], index_dtype)
    nd = run_dml(
        "DmlGatherNd", data, tuples, input_dimension_count=2, indices_dimension_count=2, batch_dimension_count=0
    )
    assert_identical(nd, np.array([[11, 1]]).astype(data_dtype).reshape(1, 2))


ND = {"input_dimension_count": 3, "indices_dimension_count": 3, "batch_dimension_count": 1}


@pytest.mark.parametrize("mode", ["directml", "clamp", "zero"])
def test_gather_nd_modes_in_onnxruntime_equal_the_semantics(mode):
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    indices = np.array([[[0, 5], [2, 3]], [[2, -9], [-1, -4]]], np.int64)
    output = run_dml("DmlGatherNd", data, indices, out_of_bounds=mode, **ND)
    assert_identical(output, onnx_gather.dml_gather_nd(data, indices, 3, 3, 1, mode))


def test_gather_nd_error_mode_raises_from_run():
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    with pytest.raises(GatherError, match=r"^DmlGatherNd: index 5 at indices position \(0, 0, 1\) is out of bounds"):
        run_dml("DmlGatherNd", data, np.array([[[0, 5]], [[1, 1]]]), out_of_bounds="error", **ND)


def test_gather_nd_on_a_large_case_equals_the_semantics():
    rng = np.random.default_rng(3)
    data = rng.standard_normal((4, 64, 32, 16)).astype(np.float32)
    inside = rng.integers(-32, 32, (1, 4, 500, 2))  # padded to the input's 4 dimensions
    outside = inside.copy()
    outside[0, 0, 7, 1] = 40  # one out of bounds: the op falls back to the reference for this run
    for indices in (inside, outside):
        output = run_dml(
            "DmlGatherNd",
            data,
            indices,
            input_dimension_count=4,
            indices_dimension_count=3,
            batch_dimension_count=1,
            out_of_bounds="directml",
        )
        assert output.shape == (1, 4, 500, 16)
        assert_identical(output, onnx_gather.dml_gather_nd(data, indices, 4, 3, 1))


OUT_OF_BOUNDS = np.array([[7, -7, 5, -6, 2]], np.int64)  # axis size 6: 7 and -7 are out of bounds


@pytest.mark.parametrize(("mode", "expected"), [("clamp", [[15, 10, 15, 10, 12]]), ("zero", [[0, 0, 15, 10, 12]])])
@pytest.mark.parametrize("op_type", ["DmlGather", "DmlGatherElements"])
def test_out_of_bounds_mode_in_onnxruntime(op_type, mode, expected):
    data = np.arange(10, 16, dtype=np.float32).reshape(1, 6)
    attributes = {"index_dimensions": 1} if op_type == "DmlGather" else {}
    output = run_dml(op_type, data, OUT_OF_BOUNDS, axis=1, out_of_bounds=mode, **attributes)
    assert_identical(output, np.array(expected, np.float32))


@pytest.mark.parametrize("op_type", ["DmlGather", "DmlGatherElements"])
def test_error_mode_raises_from_run_with_the_ops_message(op_type):
    data = np.arange(10, 16, dtype=np.float32).reshape(1, 6)
    attributes = {"index_dimensions": 1} if op_type == "DmlGather" else {}
    message = rf"^{op_type}: index 7 at indices position \(0, 0\) is out of bounds .* \(valid range \[-6, 5\]\)$"
    with pytest.raises(GatherError, match=message):
        run_dml(op_type, data, OUT_OF_BOUNDS, axis=1, out_of_bounds="error", **attributes)


@pytest.mark.parametrize(("mode", "expected"), [("clamp", [3, 1, 3]), ("zero", [0, 1, 0])])
def test_unsigned_indices_above_2_63_in_onnxruntime(mode, expected):
    indices = np.array([2**63 + 5, 1, 2**64 - 1], np.uint64)
    output = run_dml("DmlGather", np.arange(4, dtype=np.int64), indices, axis=0, index_dimensions=1, out_of_bounds=mode)
    assert_identical(output, np.array(expected, np.int64))
    with pytest.raises(GatherError, match=r"index 9223372036854775813 .* \(valid range \[0, 3\]\)"):
        run_dml("DmlGather", np.arange(4, dtype=np.int64), indices, axis=0, index_dimensions=1, out_of_bounds="error")


# Validation errors a node can meet at run time, with the message InferenceSession.run must raise.
RUN_TIME_ERRORS = {
    "ranks differ": ("DmlGather", (2, 3), (4,), {"axis": 0, "index_dimensions": 1}, r"input has 2 dimensions"),
    "more than 8 dimensions": ("DmlGatherElements", (1,) * 9, (1,) * 9, {"axis": 0}, r"dimension count 9"),
    "axis out of range": ("DmlGather", (2, 3), (1, 2), {"axis": 2, "index_dimensions": 1}, r"axis 2 is out of range"),
    "index_dimensions out of range": (
        "DmlGather",
        (2, 3),
        (1, 2),
        {"axis": 0, "index_dimensions": 3},
        r"index_dimensions 3 is out of range",
    ),
    "an output that crops index entries": (
        "DmlGather",
        (2, 3),
        (2, 2),
        {"axis": 0, "index_dimensions": 2},
        r"crops index entries of C",
    ),
    "leading index sizes not predicted": (
        "DmlGather",
        (1, 3),
        (2, 2),
        {"axis": 1, "index_dimensions": 1},
        r"its process then ends",
    ),
    "sizes differ off the axis": ("DmlGatherElements", (2, 3), (2, 2), {"axis": 0}, r"on dimension 1 \(2 != 3\)"),
    "unknown out_of_bounds": (
        "DmlGatherElements",
        (3,),
        (1,),
        {"axis": 0, "out_of_bounds": "wrap"},
        r"out_of_bounds 'wrap' is unknown",
    ),
}


@pytest.mark.parametrize("case", RUN_TIME_ERRORS, ids=str)
def test_run_time_validation_error_is_raised_from_run(case):
    op_type, input_shape, indices_shape, attributes, message = RUN_TIME_ERRORS[case]
    input = np.zeros(input_shape, np.float32)
    indices = np.zeros(indices_shape, np.int64)
    with pytest.raises(GatherError, match=rf"^{op_type}: .*{message}"):
        run_dml(op_type, input, indices, **attributes)


def test_an_attribute_of_the_wrong_type_fails_session_creation():
    model = single_node_model("DmlGatherElements", np.float32, np.int64, axis="first", out_of_bounds="clamp")
    with pytest.raises(Exception, match="attribute 'axis'"):
        onnx_gather.InferenceSession(model)


def test_a_missing_attribute_fails_session_creation():
    model = single_node_model("DmlGatherElements", np.float32, np.int64, axis=0)  # no out_of_bounds
    with pytest.raises(Exception, match="out_of_bounds"):
        onnx_gather.InferenceSession(model)


def test_an_unsupported_type_fails_session_creation():
    model = single_node_model("DmlGather", np.bool_, np.int64, axis=0, index_dimensions=1, out_of_bounds="clamp")
    with pytest.raises(Exception, match="DmlGather"):
        onnx_gather.InferenceSession(model)


def test_a_failed_run_leaves_the_session_working():
    model = single_node_model("DmlGatherElements", np.int32, np.int64, axis=0, out_of_bounds="error")
    session = onnx_gather.InferenceSession(model)
    data = np.arange(4, dtype=np.int32)
    with pytest.raises(GatherError):
        session.run(None, {"input": data, "indices": np.array([4])})
    assert_identical(session.run(None, {"input": data, "indices": np.array([3, -4])})[0], np.array([3, 0], np.int32))


GATHER_400 = single_node_model("DmlGather", np.float32, np.int64, axis=0, index_dimensions=1, out_of_bounds="clamp")
FEEDS_400 = {"input": np.zeros((20, 20), np.float32), "indices": np.arange(20).reshape(1, 20)}  # 400 elements out


def test_the_output_limit_belongs_to_its_session():
    limited = onnx_gather.InferenceSession(GATHER_400, max_output_elements=399)
    with pytest.raises(
        GatherError, match=r"^DmlGather: the output \(20, 20\) would have 400 elements, more than the limit 399$"
    ):
        limited.run(None, FEEDS_400)
    assert onnx_gather.InferenceSession(GATHER_400).run(None, FEEDS_400)[0].shape == (20, 20)
    assert onnx_gather.InferenceSession(GATHER_400, max_output_elements=400).run(None, FEEDS_400)[0].shape == (20, 20)
    with pytest.raises(GatherError, match="more than the limit 399"):  # the others did not change it
        limited.run(None, FEEDS_400)
    with pytest.raises(ValueError, match="the output element limit must be positive, got 0"):
        onnx_gather.InferenceSession(GATHER_400, max_output_elements=0)


@pytest.mark.parametrize("command", ["run", "parity"])
def test_a_commands_max_elements_limits_only_its_own_run(command, capsys):
    # --max-elements was a module global that every later session of the process kept.
    backends = ["--backend", "pyop"] if command == "run" else ["--backends", "pyop,cpu"]
    assert main([command, str(sample_model_path()), *backends, "--max-elements", "10"]) == 1
    said = capsys.readouterr()
    assert "more than the limit 10" in said.out + said.err
    assert onnx_gather.InferenceSession(GATHER_400).run(None, FEEDS_400)[0].shape == (20, 20)
    assert run_dml("DmlGather", FEEDS_400["input"], FEEDS_400["indices"], axis=0, index_dimensions=1).shape == (20, 20)


def test_session_accepts_a_path_bytes_and_model(tmp_path):
    model = single_node_model("DmlGatherElements", np.int8, np.int32, axis=0, out_of_bounds="clamp")
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    feeds = {"input": np.arange(3, dtype=np.int8), "indices": np.array([2, 0], np.int32)}
    for source in (model, model.SerializeToString(), str(path), path):
        assert_identical(onnx_gather.InferenceSession(source).run(None, feeds)[0], np.array([2, 0], np.int8))


def test_session_options_can_be_registered_again_and_reused():
    options = ops.register(onnx_gather.session_options())
    model = single_node_model("DmlGatherElements", np.uint8, np.int64, axis=0, out_of_bounds="clamp")
    plain = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    ours = onnx_gather.InferenceSession(model, options)
    feeds = {"input": np.arange(3, dtype=np.uint8), "indices": np.array([1])}
    assert_identical(plain.run(None, feeds)[0], ours.run(None, feeds)[0])


def test_parallel_execution_is_refused_with_a_reason():
    options = onnxruntime.SessionOptions()
    options.execution_mode = onnxruntime.ExecutionMode.ORT_PARALLEL
    model = single_node_model("DmlGatherElements", np.float32, np.int64, axis=0, out_of_bounds="clamp")
    with pytest.raises(ValueError, match="needs sequential execution"):
        onnx_gather.InferenceSession(model, options)


def test_results_go_back_to_the_bridge_as_arrays_not_lists():
    # The bridge's default path turns results into Python lists, about 400 times slower than native.
    op_id = next(op_id for op_id, operator in ops._registered.items() if operator.op_type == "DmlGatherElements")
    feed = [np.arange(6, dtype=np.float32).reshape(2, 3), np.zeros((2, 3), np.int64)]
    returned_id, shape, result = ops._invoke(op_id, feed, {"axis": "1", "out_of_bounds": "clamp"})
    assert returned_id == op_id and tuple(shape) == (2, 3)
    assert type(result) is np.ndarray and result.flags.c_contiguous


def _run_child(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=120, check=False
    )


def test_a_failing_op_in_a_plain_session_logs_and_the_process_carries_on():
    child = _run_child("""
        import numpy as np, onnxruntime, onnx_gather
        from onnx_gather.graphs.emit import single_node_model
        model = single_node_model("DmlGatherElements", np.float32, np.int64, axis=0, out_of_bounds="error")
        session = onnxruntime.InferenceSession(model.SerializeToString(), onnx_gather.session_options())
        output = session.run(None, {"input": np.zeros(3, np.float32), "indices": np.array([0, 9])})[0]
        print("still running; output shape", output.shape)
        """)
    assert child.returncode == 0, child.stderr
    assert "still running; output shape (0,)" in child.stdout
    assert "DmlGatherElements: index 9 at indices position (1,) is out of bounds" in child.stderr


def test_other_python_ops_keep_working_beside_ours():
    child = _run_child("""
        import numpy as np, onnx, onnxruntime, onnx_gather
        from onnx import helper, TensorProto
        from onnxruntime_extensions import onnx_op, PyCustomOpDef

        @onnx_op(op_type="Twice", inputs=[PyCustomOpDef.dt_float], outputs=[PyCustomOpDef.dt_float])
        def twice(x):
            return x * 2

        node = helper.make_node("Twice", ["x"], ["y"], domain="ai.onnx.contrib")
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                  helper.make_opsetid("ai.onnx.contrib", 1)], ir_version=10)
        session = onnx_gather.InferenceSession(model)
        print(session.run(None, {"x": np.array([1.5, -2], np.float32)})[0].tolist())
        """)
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "[3.0, -4.0]"


@pytest.mark.parametrize("op_type", ["DmlGather", "DmlGatherElements"])
def test_an_empty_axis_reads_zeros_in_onnxruntime(op_type):
    attributes = {"index_dimensions": 1} if op_type == "DmlGather" else {}
    output = run_dml(op_type, np.zeros((1, 0), np.uint16), np.array([[2, -1]], np.int32), axis=1, **attributes)
    assert_identical(output, np.zeros((1, 2), np.uint16))
    empty = run_dml(op_type, np.zeros((1, 0), np.uint16), np.zeros((1, 0), np.int32), axis=1, **attributes)
    assert_identical(empty, np.zeros((1, 0), np.uint16))


def test_error_mode_checks_indices_even_when_the_output_is_empty():
    # Found by tools/fuzz.py: with an input empty off the axis, the gather reads nothing, yet the index is bad.
    data = np.zeros((3, 0, 2), np.float32)
    indices = np.array([[[np.iinfo(np.int64).max]]])
    with pytest.raises(GatherError, match=r"index 9223372036854775807 at indices position \(0, 0, 0\)"):
        run_dml("DmlGather", data, indices, axis=2, index_dimensions=1, out_of_bounds="error")
    assert run_dml("DmlGather", data, indices, axis=2, index_dimensions=1).shape == (3, 0, 1)


def test_the_custom_ops_register_on_first_use_and_name_the_version_when_the_bridge_lacks_its_private_hook():
    # In a fresh interpreter: importing the ops registers nothing; a bridge without the private names onnx-gather
    # hooks into gives an error naming the installed version and the tested one.
    import subprocess
    import sys

    code = (
        "import onnx_gather.runtime.ops as ops; assert not ops._registered; "
        "del ops.bridge._on_pyop_invocation\n"
        "try:\n    ops.session_options()\nexcept ImportError as error:\n    print(error)"
    )
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    version = importlib.metadata.version("onnxruntime-extensions")
    assert printed.strip() == (
        f"onnxruntime-extensions {version} lacks _ocos._on_pyop_invocation, which onnx-gather's custom ops hook "
        "into; onnx-gather is tested with onnxruntime-extensions 0.15"
    )
