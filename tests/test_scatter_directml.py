"""Real DirectML's scatters against onnx_gather.core.scatter (docs/semantics.md section 10), through both doors:
ONNX Runtime's DirectML provider and DirectML called directly (direct.exe), on random cases out of bounds and in.

Skipped where real DirectML is not set up; in CI (CI=true) they fail instead.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import require_directml

from onnx_gather.conformance import scatters
from onnx_gather.core.descs import Case, TensorDesc
from onnx_gather.directml.direct import DirectRunner
from onnx_gather.directml.process import SessionCreationError

CASES = scatters.random_scatter_cases(36, 2000)


@pytest.fixture(scope="module")
def direct():
    require_directml(wine=True)
    with DirectRunner() as runner:
        yield runner


def _differing(cases, outputs) -> list[str]:
    return [
        f"{c.op} axis {c.axis} {c.data.dtype} {c.data.shape} indices {c.indices.dtype} {c.indices.ravel()[:6]}"
        for c, got in zip(cases, outputs, strict=True)
        if got is None or got.shape != c.data.shape or got.tobytes() != c.expected().tobytes()
    ]


@pytest.mark.directml
def test_the_provider_scatters_as_core_states(directml):
    assert sum(c.out_of_bounds for c in CASES) > 100
    assert _differing(CASES, scatters.run_provider(directml, CASES)) == []


@pytest.mark.directml
def test_directml_called_directly_scatters_as_core_states_and_writes_nothing_else(direct):
    results = scatters.run_direct(direct, CASES, seed=36)
    assert _differing(CASES, [tensor for tensor, _ in results]) == []
    assert all(kept for _, kept in results)  # neighbours, gaps and fill outside the output's total untouched


@pytest.mark.directml
def test_directml_refuses_more_indices_than_the_axis_holds(directml, direct):
    data, indices = np.zeros(2, np.float32), np.zeros(4, np.int64)
    case = scatters.ScatterCase("ScatterElements", data, indices, np.ones(4, np.float32))
    desc = scatters.direct_case(case, "own buffer", 0xCD)
    assert direct.run([desc])[0].refused == "create 0x80070057"
    with pytest.raises(SessionCreationError, match="80070057"):  # the provider takes the node and fails the session
        directml.load(scatters.scatter_model([case]), fallback=True)


@pytest.mark.directml
@pytest.mark.parametrize(
    ("opset", "reduction", "provider"), [(16, "none", "Dml"), (16, "add", "CPU"), (18, "none", "CPU")]
)
def test_where_the_provider_puts_a_scatter(directml, opset, reduction, provider):
    case = scatters.ScatterCase("ScatterND", np.zeros(4, np.float32), np.array([[1]]), np.ones(1, np.float32))
    model = scatters.scatter_model([case])
    model.opset_import[0].version = opset
    model.graph.node[0].attribute.append(onnx.helper.make_attribute("reduction", reduction))
    loaded = directml.load(model, fallback=True)
    directml.free(loaded)
    assert list(loaded.placed) == [f"{provider}ExecutionProvider"]


@pytest.mark.directml
def test_an_output_in_place_or_beside_others_keeps_its_writes_inside(direct):
    """An index just past the end, far past and negative beyond -size: nothing lands outside the output."""
    data = np.arange(6, dtype=np.float32)
    for place in scatters.PLACES:
        case = scatters.ScatterCase("ScatterElements", data, np.array([6, 1000, -7]), np.full(3, 9, np.float32))
        desc = scatters.direct_case(case, place, 0xAA)
        outcome = direct.run([desc])[0]
        expected, _ = scatters.expected_buffer(desc, data)
        assert outcome.output == expected, place


def test_a_direct_case_lays_tensors_out_as_the_provider_does():
    case = scatters.ScatterCase("ScatterND", np.zeros((3, 1), np.uint8), np.array([[2, 0]]), np.ones(1, np.uint8))
    desc = scatters.direct_case(case, "in place", 0)
    assert isinstance(desc, Case) and desc.offsets[3] == desc.offsets[0]
    assert desc.output == TensorDesc.provider("UINT8", (3, 1))
