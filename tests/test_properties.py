"""Property tests: the custom ops in ONNX Runtime equal the numpy semantics and ONNX Runtime's native kernels.

Shapes are drawn as standard ONNX problems (data rank r, indices rank q, axis a) and put into DML form as
ONNX Runtime's DirectML provider does (docs/semantics.md, 6): N = max(r, q, r + q - 1), leading ones, axis + N - r.
"""

from __future__ import annotations

import numpy as np
from conftest import assert_identical, random_tensor, run_dml, run_native
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import onnx_gather
from onnx_gather.core import contract
from onnx_gather.runtime import ops

# No deadline and no too-slow health check: how fast examples come depends on the machine, not on the code.
SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])

data_dtypes = st.sampled_from(ops.NODE_DTYPES)
index_dtypes = st.sampled_from(contract.INDEX_DTYPES)
# Small sizes, now and then an empty dimension.
sizes = st.sampled_from([1, 2, 3, 1, 2, 3, 0])
axis_sizes = st.integers(1, 3)


def _indices(rng, shape, dtype, size, spread=1):
    """In-bounds indices (negative ones too, where the type is signed), or with ``spread`` > 1 a wider range."""
    low = -size * spread if np.dtype(dtype).kind == "i" else 0
    return rng.integers(low, size * spread, shape).astype(dtype)


def _pad(array, n):
    return array.reshape((1,) * (n - array.ndim) + array.shape)


@st.composite
def gather_problems(draw, spread=1):
    r = draw(st.integers(1, 8))
    q = draw(st.integers(0, 9 - r))  # keeps N = max(r, q, r + q - 1) within 8
    axis = draw(st.integers(0, r - 1))
    data_shape = [draw(sizes) for _ in range(r)]
    data_shape[axis] = draw(axis_sizes)
    index_shape = tuple(draw(sizes) for _ in range(q))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    data = random_tensor(rng, tuple(data_shape), draw(data_dtypes))
    indices = _indices(rng, index_shape, draw(index_dtypes), data_shape[axis], spread)
    return data, indices, axis


@st.composite
def gather_elements_problems(draw, spread=1):
    r = draw(st.integers(1, 8))
    axis = draw(st.integers(0, r - 1))
    data_shape = [draw(sizes) for _ in range(r)]
    data_shape[axis] = draw(axis_sizes)
    index_shape = list(data_shape)
    index_shape[axis] = draw(sizes)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    data = random_tensor(rng, tuple(data_shape), draw(data_dtypes))
    indices = _indices(rng, tuple(index_shape), draw(index_dtypes), data_shape[axis], spread)
    return data, indices, axis


def _dml_gather_form(data, indices, axis):
    n = max(data.ndim, indices.ndim, data.ndim + indices.ndim - 1)
    return _pad(data, n), _pad(indices, n), axis + n - data.ndim, indices.ndim


@SETTINGS
@given(gather_problems(), st.sampled_from(["clamp", "zero", "error"]))
def test_dml_gather_in_onnxruntime_equals_semantics_and_native_gather(problem, mode):
    data, indices, axis = problem
    input, dml_indices, dml_axis, index_dimensions = _dml_gather_form(data, indices, axis)
    output = run_dml(
        "DmlGather", input, dml_indices, axis=dml_axis, index_dimensions=index_dimensions, out_of_bounds=mode
    )
    assert_identical(output, onnx_gather.dml_gather(input, dml_indices, dml_axis, index_dimensions, mode))
    native = run_native("Gather", data, indices, axis)
    assert_identical(output.reshape(native.shape), native)


@SETTINGS
@given(gather_elements_problems(), st.sampled_from(["clamp", "zero", "error"]))
def test_dml_gather_elements_in_onnxruntime_equals_semantics_and_native_gather_elements(problem, mode):
    data, indices, axis = problem
    output = run_dml("DmlGatherElements", data, indices, axis=axis, out_of_bounds=mode)
    assert_identical(output, onnx_gather.dml_gather_elements(data, indices, axis, mode))
    assert_identical(output, run_native("GatherElements", data, indices, axis))


@SETTINGS
@given(gather_problems(spread=3), st.sampled_from(["clamp", "zero"]))
def test_dml_gather_with_out_of_bounds_indices_equals_semantics(problem, mode):
    input, indices, axis, index_dimensions = _dml_gather_form(*problem)
    output = run_dml("DmlGather", input, indices, axis=axis, index_dimensions=index_dimensions, out_of_bounds=mode)
    assert_identical(output, onnx_gather.dml_gather(input, indices, axis, index_dimensions, mode))


@SETTINGS
@given(gather_elements_problems(spread=3), st.sampled_from(["clamp", "zero"]))
def test_dml_gather_elements_with_out_of_bounds_indices_equals_semantics(problem, mode):
    data, indices, axis = problem
    output = run_dml("DmlGatherElements", data, indices, axis=axis, out_of_bounds=mode)
    assert_identical(output, onnx_gather.dml_gather_elements(data, indices, axis, mode))
