"""ONNX's backend node suite on real DirectML (onnx_gather.conformance.node_suite): the pure parts (ONNX Runtime's
pass/fail rule, re-stamping, the CI's lists), and a fixed sample of the suite on real DirectML held against the
recorded full run and against ONNX Runtime's DirectML CI."""

from __future__ import annotations

import re
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx_gather.conformance import node_suite
from onnx_gather.graphs.placement.nodes import directml_versions
from onnx_gather.runtime.comparison import Tolerance

EXPECTATIONS = node_suite.Expectations.bundled()


def _one_node(op_type: str, opset: int, ir_version: int, **attributes) -> onnx.ModelProto:
    node = helper.make_node(op_type, ["x"], ["y"], **attributes)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    graph = helper.make_graph([node], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version)


def test_the_tolerance_is_ort_s_default_unless_its_overrides_name_the_case():
    assert EXPECTATIONS.tolerance("test_abs") == Tolerance(atol=1e-5, rtol=1e-3)
    assert EXPECTATIONS.tolerance("test_dft") == Tolerance(atol=1e-3, rtol=1e-3)
    assert EXPECTATIONS.tolerance("test_stft_with_window") == Tolerance(atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize(
    ("expected", "actual", "passes"),
    [
        (np.array([1000.0], np.float32), np.array([1000.9], np.float32), True),  # within rtol 1e-3
        (np.array([1000.0], np.float32), np.array([1001.1], np.float32), False),
        (np.array([0.0], np.float32), np.array([9e-6], np.float32), True),  # within atol 1e-5
        (np.array([0.0], np.float32), np.array([2e-5], np.float32), False),
        (np.array([np.nan, np.inf], np.float32), np.array([np.nan, np.inf], np.float32), True),
        (np.array([np.inf], np.float32), np.array([0.0], np.float32), False),
        (np.array([1], np.int64), np.array([1], np.int32), False),  # the expected type
        (np.array([[1.0]], np.float32), np.array([1.0], np.float32), False),  # the expected shape
        (np.array(["a"], object), np.array(["a"], object), True),
        (np.array(["a"], object), np.array(["b"], object), False),
    ],
)
def test_compare_outputs_holds_outputs_as_ort_s_backend_test_series_does(expected, actual, passes):
    symptom = node_suite.compare_outputs([expected], {"y": actual}, ["y"], EXPECTATIONS.tolerance("test_abs"))
    assert (symptom == "") == passes, symptom
    if passes:  # numpy's own rule agrees
        np.testing.assert_allclose(actual, expected, rtol=1e-3, atol=1e-5) if expected.dtype != object else None


def test_a_difference_is_said_with_its_size_and_first_value():
    symptom = node_suite.compare_outputs(
        [np.array([0.0, np.inf], np.float32)], {"y": np.array([0.0, 0.0], np.float32)}, ["y"], Tolerance(1e-5, 1e-3)
    )
    assert symptom.startswith("y: 1 of 2 differ") and symptom.endswith("at [1]: 0.0 where inf is expected")


def test_an_operator_without_a_kernel_at_its_opset_is_restamped_to_the_newest_with_one():
    again = node_suite.restamp(_one_node("Acos", 22, 10))  # Acos-22: DirectML registers Acos-7 only
    assert again is not None and again.opset == 21 and again.model is not None
    assert [entry.version for entry in again.model.opset_import] == [21]
    assert node_suite.restamp(_one_node("Abs", 13, 7)) is None  # Abs-13 has its kernel


def test_a_stamp_onnx_runtime_refuses_is_restamped_and_its_ir_version_lowered():
    again = node_suite.restamp(_one_node("Abs", 28, 14))  # ONNX Runtime 1.24.4 takes opsets up to 25, IR up to 13
    assert again is not None and again.opset == node_suite.ORT_OPSET == 25
    assert again.model is not None and again.model.ir_version == 13


def test_the_checker_s_refusal_of_a_restamped_case_is_kept():
    model = _one_node("Acos", 22, 10)
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.BFLOAT16  # Acos-7 takes no bfloat16
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.BFLOAT16
    again = node_suite.restamp(model)
    assert again is not None and again.model is None and "bfloat16" in again.refused


def test_the_ci_lists_match_as_its_runner_does_on_the_cpu_device_s_names():
    assert EXPECTATIONS.excluded("test_cast_FLOAT_to_FLOAT16") == "(FLOAT16)"
    assert EXPECTATIONS.excluded("test_equal_bcast") is not None  # "^test_equal*"
    assert EXPECTATIONS.excluded("test_abs") is None
    assert EXPECTATIONS.failing_on_directml("test_identity") == "^test_identity_cpu"
    assert EXPECTATIONS.failing_on_directml("test_identity_sequence") is None
    assert EXPECTATIONS.failing_on_directml("test_asin_example") is not None
    assert EXPECTATIONS.failing_on_directml("test_asin") is None
    assert EXPECTATIONS.ran("test_asin") and not EXPECTATIONS.ran("test_attention_4d_causal_nonpad_batch_prefill")


@pytest.mark.parametrize(
    ("verdict", "listed", "standing"),
    [
        ("pass", False, node_suite.PASS_BOTH),
        ("fail", True, node_suite.FAIL_BOTH),
        ("fail", False, node_suite.FAIL_HERE_ONLY),
        ("pass", True, node_suite.PASS_HERE_ONLY),
        ("not run", False, None),
    ],
)
def test_a_case_stands_against_the_ci_by_its_verdict_and_the_directml_list(verdict, listed, standing):
    case = "test_asin_example" if listed else "test_asin"
    assert node_suite.standing({"case": case, "verdict": verdict}, EXPECTATIONS) == standing
    assert node_suite.standing({"case": "test_equal", "verdict": verdict}, EXPECTATIONS) is None  # excluded


def _verdicts(line: dict) -> tuple:
    again = line["restamp"] or {}
    return line["verdict"], again.get("opset"), again.get("verdict", again.get("refused"))


def test_the_sample_holds_every_operator_with_a_directml_kernel_that_the_suite_holds():
    recorded = node_suite.recorded()
    sample = node_suite.sample(recorded)
    held = {op for name in sample for op in recorded[name]["ops"]}
    assert {op for line in recorded.values() for op in line["ops"] if directml_versions(op)} <= held
    assert len(recorded) == len(node_suite.node_cases())  # the recorded run is of the installed onnx's cases


@pytest.mark.directml
def test_a_sample_of_the_suite_gives_the_recorded_verdicts_on_real_directml(tmp_path):
    from conftest import SUMMARIES, require_directml

    require_directml(wine=True)
    recorded = node_suite.recorded()
    sample = node_suite.sample(recorded)
    start = time.perf_counter()
    results = node_suite.run_suite(tmp_path / "sample.jsonl", "^(" + "|".join(map(re.escape, sample)) + ")$")
    seconds = time.perf_counter() - start
    assert sorted(results) == sample
    for name in sample:
        assert _verdicts(results[name]) == _verdicts(recorded[name]), node_suite.describe(results[name])
        standing = node_suite.standing(results[name], EXPECTATIONS)
        assert standing != node_suite.FAIL_HERE_ONLY or not results[name]["directml"], node_suite.describe(
            results[name]
        )
        assert standing == node_suite.standing(recorded[name], EXPECTATIONS)
    SUMMARIES.append(f"ONNX's node suite, a sample of {len(sample)} cases: the recorded verdicts, in {seconds:.0f} s")
