"""The DML form's geometry (onnx_gather.core.form): exact forms from docs/semantics.md's rules and examples, the
refusals, and the form's padding checked against numpy's own gathers through core.semantics."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from onnx_gather.core import contract, semantics
from onnx_gather.core.form import DmlForm, FormError, dml_form
from onnx_gather.core.sizes import output_rank


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        # semantics.md section 2: input {3,2} along axis 1 with indices {1,2} is input {1,3,2}, indices {1,1,2}, axis 2.
        (("Gather", 2, 2, 1), DmlForm("Gather", 3, (2, 2), 3, 2)),
        # Scalar indices: index_dimensions 0, the output one rank below the data.
        (("Gather", 2, 0, 0), DmlForm("Gather", 2, (2, 0), 1, 0)),
        (("Gather", 1, 0, 0), DmlForm("Gather", 1, (1, 0), 0, 0)),
        # A negative axis counts from the end, then moves by the input's leading ones.
        (("Gather", 3, 1, -1), DmlForm("Gather", 3, (3, 1), 3, 2)),
        (("Gather", 3, 1, -3, 0, 0, 5), DmlForm("Gather", 5, (3, 1), 3, 2)),
        # Ranks above 4: the output's rank decides, up to 8.
        (("Gather", 5, 4, 4), DmlForm("Gather", 8, (5, 4), 8, 7)),
        (("Gather", 3, 2, 0, 0, 0, 4), DmlForm("Gather", 4, (3, 2), 4, 1)),
        (("GatherElements", 3, 3, -2), DmlForm("GatherElements", 3, (3, 3), 3, 1)),
        (("GatherElements", 2, 2, 1, 0, 0, 4), DmlForm("GatherElements", 4, (2, 2), 2, 3)),
        (("GatherElements", 8, 8, 7), DmlForm("GatherElements", 8, (8, 8), 8, 7)),
        # Section 3b: input [[0,1],[2,3]] with indices [[1],[0]] is counts 2, 2, 0.
        (("GatherND", 2, 2, 0, 0, 1), DmlForm("GatherND", 2, (2, 2), 2, 0, 0, 1)),
        # Section 3b: data {3,2,2}, indices {3,2,2}, batch 1 at N = 4: input {1,3,2,2}, output {1,1,3,2}.
        (("GatherND", 3, 3, 0, 1, 2, 4), DmlForm("GatherND", 4, (3, 3), 2, 0, 1, 2)),
        (("GatherND", 3, 3, 0, 1, 2), DmlForm("GatherND", 3, (3, 3), 2, 0, 1, 2)),
        # Tuples as long as the data's rank: the output has the indices' leading dims only (here none: a scalar).
        (("GatherND", 2, 2, 0, 0, 2), DmlForm("GatherND", 2, (2, 2), 1, 0, 0, 2)),
        (("GatherND", 1, 1, 0, 0, 1), DmlForm("GatherND", 1, (1, 1), 0, 0, 0, 1)),
        (("GatherND", 2, 6, 0, 0, 1), DmlForm("GatherND", 6, (2, 6), 6, 0, 0, 1)),
        (("GatherND", 4, 3, 0, 2, 1), DmlForm("GatherND", 4, (4, 3), 3, 0, 2, 1)),
    ],
)
def test_forms(arguments, expected):
    assert dml_form(*arguments) == expected


@pytest.mark.parametrize(
    ("arguments", "attributes"),
    [
        (("Gather", 2, 2, 1), {"axis": 2, "index_dimensions": 2}),
        (("Gather", 2, 0, -1, 0, 0, 4), {"axis": 3, "index_dimensions": 0}),
        (("GatherElements", 2, 2, -1, 0, 0, 3), {"axis": 2}),
        (
            ("GatherND", 3, 3, 0, 1, 2, 4),
            {"input_dimension_count": 3, "indices_dimension_count": 3, "batch_dimension_count": 1},
        ),
    ],
)
def test_attributes_are_the_dml_ops_integer_attributes(arguments, attributes):
    form = dml_form(*arguments)
    assert form.attributes == attributes
    declared = contract.BY_STANDARD[form.op].attributes
    assert list(form.attributes) == [a.name for a in declared if a.type == onnx.AttributeProto.INT]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("Gather", 2, 1, 2), "axis 2 is out of range [-2, 2) for data of rank 2"),
        (("Gather", 2, 1, -3), "axis -3 is out of range [-2, 2) for data of rank 2"),
        (("GatherElements", 3, 2, 0), "indices rank 2 differs from data rank 3"),
        (("GatherND", 2, 3, 0, 2, 1), "batch_dims 2 is out of range [0, 2) for data rank 2 and indices rank 3"),
        (("GatherND", 2, 0, 0, 0, 1), "batch_dims 0 is out of range [0, 0) for data rank 2 and indices rank 0"),
        (("GatherND", 3, 3, 0, 1, 3), "index tuples of 3 coordinates do not fit data of rank 3 with batch_dims 1"),
        (("GatherND", 3, 3, 0, 0, 0), "index tuples of 0 coordinates do not fit data of rank 3 with batch_dims 0"),
        (("Gather", 3, 3, 0, 0, 0, 4), "it needs 5 dimensions, more than the dimension count 4"),
        (("Gather", 5, 5, 0), "it needs 9 dimensions, more than DirectML's 8"),
        (("Gather", 5, 5, 0, 0, 0, 8), "it needs 9 dimensions, more than the dimension count 8"),
        (("GatherElements", 9, 9, 0), "it needs 9 dimensions, more than DirectML's 8"),
        (("GatherND", 5, 6, 0, 0, 1), "it needs 9 dimensions, more than DirectML's 8"),
        (("GatherND", 3, 3, 0, 0, 1, 3), "it needs 4 dimensions, more than the dimension count 3"),
    ],
)
def test_refusals(arguments, message):
    with pytest.raises(FormError) as refused:
        dml_form(*arguments)
    assert str(refused.value) == message


def test_a_given_dimension_count_is_the_callers():
    """The lowering gives a DML node's N, which to_dml never makes above 8: only the ranks are held to it."""
    assert dml_form("Gather", 2, 1, 0, dimension_count=9) == DmlForm("Gather", 9, (2, 1), 2, 7)


def _nd(data: np.ndarray, indices: np.ndarray, batch: int) -> np.ndarray:
    """ONNX's GatherND, in-bounds indices, with equal batch sizes."""
    k = indices.shape[-1]
    rows = [[data[b][tuple(t)] for t in indices[b].reshape(-1, k)] for b in np.ndindex(indices.shape[:batch])]
    return np.array(rows, dtype=data.dtype).reshape(indices.shape[:-1] + data.shape[batch + k :])


def _standard(op: str, data: np.ndarray, indices: np.ndarray, axis: int, batch: int) -> np.ndarray:
    if op == "Gather":
        return np.take(data, indices, axis=axis)
    if op == "GatherElements":
        return np.take_along_axis(data, indices, axis=axis)
    return _nd(data, indices, batch)


def _random_gather(rng: np.random.Generator) -> tuple[str, np.ndarray, np.ndarray, int, int]:
    op = ("Gather", "GatherElements", "GatherND")[rng.integers(3)]
    r = int(rng.integers(1, 5))
    data = rng.integers(0, 100, tuple(rng.integers(1, 4, r))).astype(np.int32)
    axis, batch = int(rng.integers(-r, r)), int(rng.integers(0, r))
    if op == "Gather":
        shape = tuple(rng.integers(1, 3, int(rng.integers(0, 4))))
        return op, data, rng.integers(0, data.shape[axis], shape), axis, 0
    if op == "GatherElements":
        shape = tuple(int(rng.integers(1, 4)) if d == axis % r else s for d, s in enumerate(data.shape))
        return op, data, rng.integers(0, data.shape[axis], shape), axis, 0
    k = int(rng.integers(1, r - batch + 1))
    middle = tuple(rng.integers(1, 3, int(rng.integers(0, 3))))
    sizes = np.array(data.shape[batch : batch + k])
    indices = (rng.random((*data.shape[:batch], *middle, k)) * sizes).astype(np.int64)
    return op, data, indices, 0, batch


@pytest.mark.parametrize("count", [None, 4, 8])
def test_the_form_computes_the_standard_gather(count):
    """Padded as the form says, the DML op of core.semantics with the form's attributes gives the standard gather's
    output with the form's leading ones: 300 random in-bounds gathers of every op, scalar indices and tuples as long
    as the data's rank among them."""
    rng = np.random.default_rng(2601)
    gathers = {
        "Gather": semantics.dml_gather,
        "GatherElements": semantics.dml_gather_elements,
        "GatherND": semantics.dml_gather_nd,
    }
    checked = 0
    for _ in range(300):
        op, data, indices, axis, batch = _random_gather(rng)
        k = indices.shape[-1] if op == "GatherND" else 0
        try:
            form = dml_form(op, data.ndim, indices.ndim, axis, batch, k, count)
        except FormError:
            assert (
                count is not None
                and max(data.ndim, indices.ndim, output_rank(op, data.ndim, indices.ndim, batch, k)) > count
            )
            continue
        padded_data = data.reshape((1,) * form.input_ones + data.shape)
        padded_indices = indices.reshape((1,) * form.indices_ones + indices.shape)
        assert padded_data.ndim == padded_indices.ndim == form.dimension_count
        got = gathers[op](padded_data, padded_indices, **form.attributes)
        standard = _standard(op, data, indices, axis, batch)
        assert standard.ndim == form.output_rank
        np.testing.assert_array_equal(got, standard.reshape((1,) * form.output_ones + standard.shape))
        checked += 1
    assert checked > 250
