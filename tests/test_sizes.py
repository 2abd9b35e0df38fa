"""DirectML's size rules (onnx_gather.core.sizes), the one home the shape inference, the semantics, the prediction
and DML form call: the refusals are typed and keep the sizes the ranks and attributes state, unknown sizes are left
to the run, and C is the standard op's output."""

from __future__ import annotations

import itertools

import pytest

from onnx_gather.core.sizes import (
    Refusal,
    attribute_refusal,
    gather_c,
    gather_elements_sizes,
    gather_nd_c,
    gather_nd_sizes,
    gather_sizes,
    off_axis_difference,
    output_rank,
    output_sizes,
    standard_refusal,
)

_ND = ("input_dimension_count", "indices_dimension_count", "batch_dimension_count")


def _nd(*counts: int) -> dict[str, int]:
    return dict(zip(_ND, counts, strict=False))


@pytest.mark.parametrize(
    ("function", "input", "indices", "attributes", "stated"),
    [
        # Ranks that differ, or attributes out of range: no sizes to state.
        (gather_sizes, (2, 3), (2,), {"axis": 0, "index_dimensions": 1}, None),
        (gather_sizes, (2, 3), (1, 2), {"axis": 2, "index_dimensions": 1}, None),
        (gather_sizes, (2, 3), (1, 2), {"axis": 0, "index_dimensions": 3}, None),
        (gather_nd_sizes, (2, 3), (1, 2), _nd(3, 2, 0), None),
        (gather_nd_sizes, (2, 3), (1, 2), _nd(2, 2, 2), None),
        (gather_nd_sizes, (3, 4, 5), (2, 2, 1), _nd(3, 3, 0), None),  # C (2, 2, 4, 5): more than N = 3 dimensions
        # DirectML refuses the values, or is not safe on them: the sizes stated all the same.
        (gather_sizes, (1, 1, 3), (2, 2, 1), {"axis": 2, "index_dimensions": 1}, (1, 1, 1)),  # unsafe
        (gather_sizes, (2, 3, 4), (1, 5, 6), {"axis": 0, "index_dimensions": 3}, (6, 3, 4)),  # crops index entries
        (gather_elements_sizes, (2, 3), (4, 5), {"axis": 0}, (4, 5)),
        (gather_elements_sizes, (2, 3), (4, 5), {"axis": 7}, (4, 5)),
        (gather_nd_sizes, (2, 3, 4), (1, 5, 1), _nd(2, 2, 0), (1, 5, 4)),  # the input's leading size is not 1
        (gather_nd_sizes, (1, 3, 4), (1, 5, 3), _nd(2, 2, 0), (1, 1, 5)),  # tuples longer than the input
    ],
)
def test_refusals_keep_the_sizes_the_ranks_and_attributes_state(function, input, indices, attributes, stated):
    refusal = function(input, indices, attributes)
    assert isinstance(refusal, Refusal) and refusal.reason
    assert refusal.stated == stated


def test_an_unsafe_gather_is_no_refusal_of_directml():
    refusal = gather_sizes((1, 1, 3), (2, 2, 1), {"axis": 2, "index_dimensions": 1})
    assert refusal.unsafe and "its process then ends" in refusal.reason
    assert not gather_elements_sizes((2, 3), (4, 5), {"axis": 0}).unsafe


def test_unknown_sizes_are_left_to_the_run():
    """A size that is not an integer (None, a symbol, onnx's dim) breaks no rule on sizes' values."""
    assert gather_elements_sizes((None, "n"), (4, "m"), {"axis": 0}) == (4, "m")
    assert off_axis_difference((None, 3, 2), (5, "m", 3), 0) == 2
    assert gather_nd_sizes(("b", 3, 4), (1, "k", 1), _nd(2, 2, 0)) == (1, "k", 4)
    assert gather_sizes((2, 3), ("q", 1), {"axis": 1, "index_dimensions": 1}) == (2, 1)


def test_pad_is_what_comes_before_a_short_c():
    """DML_GATHER with index_dimensions 0 (C one short) and DML_GATHER_ND1 right-align C after ``pad``."""
    assert gather_sizes((5, 3, 4), (1, 1, 1), {"axis": 1, "index_dimensions": 0}, pad=7) == (7, 5, 4)
    assert gather_nd_sizes((3, 4), (1, 2), _nd(2, 1, 0), pad="one") == ("one", "one")
    assert output_sizes("GATHER_ND", (3, 4), (1, 2), _nd(2, 1)) == (1, 1)
    assert output_sizes("GATHER_ELEMENTS", (3, 4), (3, 2), {"axis": 1}) == (3, 2)


@pytest.mark.parametrize(
    ("arguments", "rank"),
    [
        (("Gather", 3, 2), 4),
        (("Gather", 3, 0), 2),
        (("GatherElements", 3, 3), 3),
        (("GatherND", 3, 3, 1, 2), 2),
        (("GatherND", 2, 2, 0, 2), 1),
        (("GatherND", 4, 2, 0, 1), 4),
    ],
)
def test_output_rank(arguments, rank):
    assert output_rank(*arguments) == rank


def test_output_rank_is_the_length_of_c():
    """For attributes the standard op takes, ``output_rank`` is the rank of C, the standard output."""
    for r, q in itertools.product(range(1, 6), range(0, 6)):
        data, indices = tuple(range(10, 10 + r)), tuple(range(20, 20 + q))
        for axis in range(r):
            assert len(gather_c(data, indices, axis, q)) == output_rank("Gather", r, q)
        for batch in range(min(r, q)):
            for k in range(1, r - batch + 1):
                c = gather_nd_c(data, (*indices[:-1], k), batch)
                assert len(c) == output_rank("GatherND", r, q, batch, k)


@pytest.mark.parametrize(
    ("attributes", "n", "reason"),
    [
        ({"axis": 2, "index_dimensions": 1}, 2, "axis 2 is out of range [0, 2) for 2-dimensional tensors"),
        ({"axis": 0, "index_dimensions": 3}, 2, "index_dimensions 3 is out of range [0, 2]"),
        (_nd(0, 1, 0), 0, "input_dimension_count 0 is out of range [1, 0]"),  # no axis to hold: GatherND has none
        (
            _nd(3, 2, 2),
            3,
            "batch_dimension_count 2 is out of range [0, 2) for input_dimension_count 3 and indices_dimension_count 2",
        ),
        ({"input_dimension_count": 1}, 1, None),  # a scatter's count, without batches
        ({"axis": 0, "index_dimensions": 0}, 1, None),
    ],
)
def test_attribute_ranges_are_stated_once(attributes, n, reason):
    # The shape inference, the numpy semantics, the validation of a model and the lowering all ask this.
    refused = attribute_refusal(attributes, n)
    assert (refused.reason if refused else None) == reason
    if reason is not None and set(attributes) <= {"axis", "index_dimensions"} and n:
        assert gather_sizes((1,) * n, (1,) * n, attributes) == refused


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        (("Gather", 2, None, 2), "axis 2 is out of range [-2, 2) for data of rank 2"),
        (("GatherElements", 2, 2, -2), None),
        (("Gather", None, None, 7), None),  # an unknown rank holds nothing
        (("GatherND", 2, None, 0, 2), "batch_dims 2 is out of range [0, 2) for data rank 2"),
        (("GatherND", None, 1, 0, 1), "batch_dims 1 is out of range [0, 1) for indices rank 1"),
        (("GatherND", 3, 2, 0, 1), None),
    ],
)
def test_standard_ranges_hold_the_known_ranks(arguments, reason):
    refused = standard_refusal(*arguments)
    assert (refused.reason if refused else None) == reason
