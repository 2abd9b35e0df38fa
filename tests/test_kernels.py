"""DmlGather's fast paths (np.take below kernels' size threshold, ONNX Runtime's native Gather above it) through the
custom ops, bit for bit against the semantics."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_identical, run_dml

from onnx_gather.core import contract, semantics
from onnx_gather.runtime import kernels

# input shape, axis, indices shape, index_dimensions; the large case's output of 64x32 slices of 4 KiB is 8 MiB (the
# test checks which path each case takes).
SMALL = ((1, 6, 5), 1, (1, 3, 2), 2)
LARGE = ((1, 64, 1024), 1, (1, 64, 32), 2)


def _indices(dtype: np.dtype, shape: tuple[int, ...], size: int, outside: bool) -> np.ndarray:
    """Random indices in bounds (negative ones too, if signed), or with a few out of bounds: just past either end,
    far, and (unsigned) above 2**31 or 2**63, where reading them as signed would pass for a valid negative index."""
    rng = np.random.default_rng(7)
    low = -size if dtype.kind == "i" else 0
    indices = rng.integers(low, size, shape).astype(dtype)
    if outside:
        flat = indices.reshape(-1)
        bad = [size, 10**6] + ([-size - 1, -(10**6)] if dtype.kind == "i" else [2**31 + 1, np.iinfo(dtype).max])
        flat[[0, 2, 3, -1]] = np.array(bad, dtype)
    return indices


@pytest.mark.parametrize("outside", [False, True], ids=["in-bounds", "out-of-bounds"])
@pytest.mark.parametrize("mode", contract.ATTRIBUTE_VALUES)
@pytest.mark.parametrize("index_dtype", contract.INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("case", [SMALL, LARGE], ids=["np.take", "native"])
def test_dml_gather_equals_the_semantics_on_either_side_of_the_threshold(case, index_dtype, mode, outside, monkeypatch):
    input_shape, axis, indices_shape, index_dimensions = case
    rng = np.random.default_rng(3)
    data = rng.integers(0, 2**32, input_shape, dtype=np.uint32).view(np.float32)  # every bit pattern, NaNs too
    indices = _indices(index_dtype, indices_shape, input_shape[axis], outside)
    native = kernels._native
    calls = []
    monkeypatch.setattr(kernels, "_native", lambda *args, **kwargs: calls.append(args) or native(*args, **kwargs))
    attributes = {"axis": axis, "index_dimensions": index_dimensions, "out_of_bounds": mode}
    if mode == "error" and outside:
        with pytest.raises(semantics.GatherError, match="is out of bounds"):
            run_dml("DmlGather", data, indices, **attributes)
    else:
        output = run_dml("DmlGather", data, indices, **attributes)
        assert_identical(output, semantics.dml_gather(data, indices, axis, index_dimensions, mode))
    # Unsigned indices out of bounds are caught before either path; signed ones, by the native kernel.
    assert bool(calls) is (case is LARGE and not (outside and index_dtype.kind == "u"))
