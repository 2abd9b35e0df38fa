"""ONNX's own backend test cases that hold a Gather, GatherElements or GatherND, or a ScatterElements, Scatter or
ScatterND, through to_dml and back."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from conftest import assert_all_identical, run_model

import onnx_gather
from onnx_gather.core.contract import DOMAIN, GATHER_OPS, SCATTER_BY_STANDARD
from onnx_gather.graphs.plumbing import bodies

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # some case generators overflow on purpose
    from onnx.backend.test.case.node import collect_testcases

    CASES = [
        case
        for case in collect_testcases()
        if any(
            n.op_type in (*GATHER_OPS, *SCATTER_BY_STANDARD) and n.domain in ("", "ai.onnx")
            for body in bodies(case.model)
            for n in body.nodes
        )
    ]
DIRECT = [case for case in CASES if case.name.startswith(("test_gather_", "test_gather_elements_", "test_gathernd_"))]
SCATTERS = [
    case for case in CASES if case.name.startswith(("test_scatter_", "test_scatternd", "test_scatter_elements"))
]


def _feeds(case) -> dict[str, np.ndarray]:
    inputs, _ = case.data_sets[0]
    return {value.name: array for value, array in zip(case.model.graph.input, inputs, strict=False)}


def test_the_cases_are_found():
    assert len(DIRECT) == 10  # 4 Gather, 3 GatherElements, 3 GatherND (one with batch_dims)
    assert len(CASES) > 50


def _at_opset_16(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """The model at opset 16, the provider's last scatter kernels (18's run on the CPU), where its scatter takes no
    reduction (the same op at both opsets); else None."""
    if any(a.name == "reduction" and a.s != b"none" for n in model.graph.node for a in n.attribute):
        return None
    result = onnx.ModelProto()
    result.CopyFrom(model)
    result.opset_import[0].version = min(result.opset_import[0].version, 16)
    return result


@pytest.mark.parametrize("case", SCATTERS, ids=lambda c: c.name)
def test_scatter_case_gives_its_expected_outputs_in_dml_form_and_lowered(case):
    """Those the provider runs on DirectML become DML scatters (at opset 16 where the case is written at 18); those
    with a reduction stay standard."""
    _, expected = case.data_sets[0]
    model = _at_opset_16(case.model)
    if model is None:  # a scatter with a reduction: the provider runs it on the CPU, to_dml leaves it standard
        converted = onnx_gather.to_dml(case.model)
        assert not any(n.domain == DOMAIN for n in converted.graph.node)
        assert_all_identical(run_model(converted, _feeds(case)), expected)
        return
    converted = onnx_gather.to_dml(model)
    dml = [SCATTER_BY_STANDARD[n.op_type].op_type for n in model.graph.node if n.op_type in SCATTER_BY_STANDARD]
    assert [n.op_type for n in converted.graph.node if n.domain == DOMAIN] == dml
    assert_all_identical(run_model(converted, _feeds(case), custom_ops=True), expected)
    assert_all_identical(run_model(onnx_gather.to_onnx(converted), _feeds(case)), expected)


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
