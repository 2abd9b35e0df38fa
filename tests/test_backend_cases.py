"""ONNX's own backend test cases that hold a Gather, GatherElements or GatherND, through to_dml and back."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from conftest import assert_all_identical, run_model

import onnx_gather
from onnx_gather.core.contract import GATHER_OPS
from onnx_gather.graphs.plumbing import bodies

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # some case generators overflow on purpose
    from onnx.backend.test.case.node import collect_testcases

    CASES = [
        case
        for case in collect_testcases()
        if any(
            n.op_type in GATHER_OPS and n.domain in ("", "ai.onnx") for body in bodies(case.model) for n in body.nodes
        )
    ]
DIRECT = [case for case in CASES if case.name.startswith(("test_gather_", "test_gather_elements_", "test_gathernd_"))]


def _feeds(case) -> dict[str, np.ndarray]:
    inputs, _ = case.data_sets[0]
    return {value.name: array for value, array in zip(case.model.graph.input, inputs, strict=False)}


def test_the_cases_are_found():
    assert len(DIRECT) == 10  # 4 Gather, 3 GatherElements, 3 GatherND (one with batch_dims)
    assert len(CASES) > 50


@pytest.mark.parametrize("case", DIRECT, ids=lambda c: c.name)
def test_gather_case_gives_its_expected_outputs_in_dml_form_and_lowered(case):
    _, expected = case.data_sets[0]
    converted = onnx_gather.to_dml(case.model)
    assert not any(n.op_type in GATHER_OPS for n in converted.graph.node)
    assert_all_identical(run_model(converted, _feeds(case), custom_ops=True), expected)
    assert_all_identical(run_model(onnx_gather.to_onnx(converted), _feeds(case)), expected)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_case_outputs_are_unchanged_by_conversion_and_lowering(case):
    try:
        original = run_model(case.model, _feeds(case))
    except Exception as error:  # the case needs an opset or op this onnxruntime lacks
        pytest.skip(f"onnxruntime cannot run the original model: {str(error).splitlines()[0][:160]}")
    converted = onnx_gather.to_dml(case.model)
    onnx.checker.check_model(converted)
    assert_all_identical(run_model(converted, _feeds(case), custom_ops=True), original)
    lowered = onnx_gather.to_onnx(converted)
    onnx.checker.check_model(lowered)
    assert_all_identical(run_model(lowered, _feeds(case)), original)
