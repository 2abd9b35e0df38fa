"""DmlScatterElements and DmlScatterNd as custom ops inside ONNX Runtime: core.scatter's values, bit for bit."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import assert_identical, run_dml_scatter

from onnx_gather.conformance.scatters import ScatterCase, random_scatter_cases
from onnx_gather.core import contract
from onnx_gather.core.scatter import SCATTER_MODES, ScatterError, dml_scatter_elements, dml_scatter_nd
from onnx_gather.runtime import ops

DML_OP = {"ScatterElements": "DmlScatterElements", "ScatterND": "DmlScatterNd"}


def _run(case: ScatterCase, out_of_bounds: str, duplicates: str = "last") -> np.ndarray:
    (data, indices, updates), attributes = case.dml()
    modes = {"out_of_bounds": out_of_bounds, "duplicates": duplicates}
    return run_dml_scatter(DML_OP[case.op], data, indices, updates, **modes, **attributes)


def _core(case: ScatterCase, out_of_bounds: str, duplicates: str = "last") -> np.ndarray:
    (data, indices, updates), attributes = case.dml()
    scatter = dml_scatter_elements if case.op == "ScatterElements" else dml_scatter_nd
    return scatter(data, indices, updates, *attributes.values(), out_of_bounds=out_of_bounds, duplicates=duplicates)


def _carried(cases: list[ScatterCase]) -> list[ScatterCase]:
    """The cases whose data type a DML node carries (FLOAT16 travels as FLOAT32: to_dml casts it)."""
    return [c for c in cases if c.data.dtype in ops.NODE_DTYPES]


@pytest.mark.parametrize("seed", range(4))
def test_random_scatters_give_core_scatters_values(seed):
    """In range, negative, just and far past, beyond 2^32: the op's output is core.scatter's, bit for bit."""
    cases = _carried(random_scatter_cases(seed, 60))
    assert {c.op for c in cases} == set(DML_OP)
    for case in cases:
        assert_identical(_run(case, "directml"), _core(case, "directml"))
        assert_identical(_run(case, "clamp"), _core(case, "clamp"))


def _different_updates(seed: int) -> list[ScatterCase]:
    rng = np.random.default_rng(seed)
    cases = []
    for case in _carried(random_scatter_cases(100 + seed, 40)):
        noise = rng.integers(0, 256, case.updates.nbytes, dtype=np.uint8).view(case.updates.dtype)
        cases.append(ScatterCase(case.op, case.data, case.indices, noise.reshape(case.updates.shape), case.axis))
    return cases


@pytest.mark.parametrize("seed", range(2))
def test_random_duplicates_of_different_values_keep_the_last_with_duplicates_last(seed):
    for case in _different_updates(seed):
        assert_identical(_run(case, "directml"), _core(case, "directml"))


@pytest.mark.parametrize("seed", range(2))
def test_duplicates_of_different_values_fail_by_default_as_core_says(seed):
    """Which of several different writes DirectML keeps is a race: the op refuses them, naming the element."""
    refused = 0
    for case in _different_updates(seed):
        try:
            expected = _core(case, "directml", "error")
        except ScatterError as error:
            refused += 1
            with pytest.raises(ScatterError, match=re.escape(str(error))):
                _run(case, "directml", "error")
            continue
        assert_identical(_run(case, "directml", "error"), expected)
    assert refused > 5


@pytest.mark.parametrize("index_dtype", contract.INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("data_dtype", ops.NODE_DTYPES, ids=str)
def test_every_data_and_index_type_is_registered(data_dtype, index_dtype):
    data = np.arange(12).astype(data_dtype).reshape(3, 4)
    indices = np.array([[2, 0, 1, 7]], index_dtype)
    updates = np.array([[20, 21, 22, 23]]).astype(data_dtype)
    elements = run_dml_scatter("DmlScatterElements", data, indices, updates, axis=0)
    assert_identical(elements, dml_scatter_elements(data, indices, updates, 0))
    tuples = np.array([[2, 3], [0, 9]], index_dtype)
    nd = run_dml_scatter(
        "DmlScatterNd", data, tuples, updates[:, :2], input_dimension_count=2, indices_dimension_count=2
    )
    assert_identical(nd, dml_scatter_nd(data, tuples, updates[:, :2], 2, 2))
    assert nd[2, 3] == 20 and nd[2, 1] == 21  # (0, 9): offset 9, the next rows on


def test_every_declared_scatter_is_an_op_with_its_attributes():
    assert {o.op_type for o in ops._SCATTER_OPERATORS} == set(contract.SCATTER_BY_TYPE)
    for operator in ops._SCATTER_OPERATORS:
        assert set(operator.attributes) == set(contract.SCATTER_BY_TYPE[operator.op_type].attribute_types())
    assert set(SCATTER_MODES) <= set(contract.ATTRIBUTE_VALUES)


def test_an_out_of_bounds_index_in_error_mode_raises_through_the_session():
    data, updates = np.zeros((2, 3), np.float32), np.ones((2, 1), np.float32)
    with pytest.raises(ScatterError, match=r"DmlScatterElements.*out of bounds"):
        run_dml_scatter("DmlScatterElements", data, np.array([[0], [3]]), updates, axis=1, out_of_bounds="error")
    # The same in directml mode: index 3 of row 1 is past the tensor, dropped.
    out = run_dml_scatter("DmlScatterElements", data, np.array([[0], [3]]), updates, axis=1)
    assert_identical(out, np.array([[1, 0, 0], [0, 0, 0]], np.float32))


def test_what_directml_refuses_raises_through_the_session():
    data = np.zeros((2, 3), np.float32)
    with pytest.raises(
        ScatterError, match=r"DmlScatterElements: indices of 3 on dimension 0, not the input's 2: DirectML"
    ):
        run_dml_scatter("DmlScatterElements", data, np.zeros((3, 3), np.int64), np.zeros((3, 3), np.float32), axis=1)
    with pytest.raises(ScatterError, match="DmlScatterNd: input"):
        run_dml_scatter(
            "DmlScatterNd",
            data,
            np.zeros((1, 2), np.int64),
            np.zeros((1, 3), np.float32),
            input_dimension_count=2,
            indices_dimension_count=2,
        )
