"""The one home of DirectML's size rules for its gathers (docs/semantics.md sections 1 to 3b and 8): which input and
indices sizes and attributes DML_GATHER, DML_GATHER_ELEMENTS and DML_GATHER_ND(1) take, and the output sizes they
give; and C, the concatenation those output sizes right-align, which is the standard op's output.

``gather_sizes``, ``gather_elements_sizes`` and ``gather_nd_sizes`` (``output_sizes`` by DirectML's operator name)
take the input's and the indices' sizes and the op's attributes, and return the output's sizes or the ``Refusal``
saying why DirectML does not take them. Every statement of the rules calls them: onnx's shape inference of the DML
ops (``contract``), the numpy semantics' validation (``semantics``), the prediction of DirectML's refusals
(``predict``); DML form (``form``, ``graphs.analysis``) takes the standard output from ``gather_c``, ``gather_nd_c``
and ``output_rank``.

A size is an integer where it is known, anything else where it is not (None, a symbol, onnx's dim): the rules on
sizes' values apply to the known ones; ``dim_size`` says what an onnx dim states (a negative size is dynamic). A
missing attribute counts as 0 (DML_GATHER_ND has no batch dimensions).
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import onnx

MAX_DIMENSION_COUNT = 8


@dataclass(frozen=True)
class Refusal:
    """Why DirectML does not take a gather's sizes and attributes."""

    reason: str  # one line, as the numpy semantics says it after the op's name
    stated: tuple | None = None  # the output sizes all the same, where the ranks and attributes state them
    unsafe: bool = False  # no refusal either: DirectML takes some such descs, then corrupts or ends its process


def dim_size(dim: onnx.TensorShapeProto.Dimension) -> int | str | None:
    """What a dim of an ONNX shape, declared or inferred, says: its size where it states one of 0 or more, else its
    symbol, else None (unknown). A negative size is dynamic, as ONNX Runtime takes it: paddle2onnx and tf2onnx write
    a dynamic dim as -1."""
    if dim.HasField("dim_value"):
        return dim.dim_value if dim.dim_value >= 0 else None
    return dim.dim_param or None


def _known(size: object) -> bool:
    return isinstance(size, numbers.Integral)


def output_rank(op: str, data_rank: int, indices_rank: int, batch_dims: int = 0, tuple_length: int = 0) -> int:
    """The rank of the standard output (C's length): Gather ``r + q - 1``, GatherElements ``r``, GatherND ``(q - 1) +
    (r - batch_dims - tuple_length)``, for data of rank ``r`` and indices of rank ``q`` (whatever the attributes, so
    that a gather DML form does not express has one to report)."""
    if op == "GatherND":
        return indices_rank - 1 + data_rank - batch_dims - tuple_length
    return data_rank + indices_rank - 1 if op == "Gather" else data_rank


def gather_c(input: Sequence, indices: Sequence, axis: int, index_dimensions: int) -> tuple:
    """DML_GATHER's C: ``input[:axis] + indices[-index_dimensions:] + input[axis + 1:]`` (none of the indices for
    ``index_dimensions`` 0); with every index dimension, the standard Gather's output."""
    return (*input[:axis], *indices[len(indices) - index_dimensions :], *input[axis + 1 :])


def gather_nd_c(data: Sequence, index: Sequence, batch: int) -> tuple:
    """DML_GATHER_ND1's C, of the input's and the indices' sizes that count (their last ``input_dimension_count`` and
    ``indices_dimension_count``): ``index[:-1] + data[batch + k:]``, k the tuple length ``index[-1]`` (an integer);
    the standard GatherND's output."""
    return (*index[:-1], *data[batch + index[-1] :])


def _dimension_counts(input: Sequence, indices: Sequence) -> Refusal | None:
    n = len(input)
    if len(indices) != n:
        return Refusal(
            f"input has {n} dimensions {tuple(input)} but indices has {len(indices)} {tuple(indices)}; "
            "DirectML needs the same dimension count (pad with leading 1s)"
        )
    if not 1 <= n <= MAX_DIMENSION_COUNT:
        return Refusal(f"dimension count {n} is outside DirectML's range 1 to {MAX_DIMENSION_COUNT}")
    return None


def attribute_refusal(attributes: Mapping[str, int], n: int) -> Refusal | None:
    """Why DirectML takes a DML op's integer ``attributes`` (those given; their sizes aside) for no tensors of ``n``
    dimensions: ``axis`` in [0, n), ``index_dimensions`` in [0, n], ``input_dimension_count`` and
    ``indices_dimension_count`` in [1, n], ``batch_dimension_count`` in [0, the lesser of those); None where it
    takes them."""
    axis, m = attributes.get("axis", 0), attributes.get("index_dimensions", 0)
    if not 0 <= axis < n and "axis" in attributes:
        return Refusal(f"axis {axis} is out of range [0, {n}) for {n}-dimensional tensors")
    if not 0 <= m <= n:
        return Refusal(f"index_dimensions {m} is out of range [0, {n}]")
    counts = {
        name: attributes[name] for name in ("input_dimension_count", "indices_dimension_count") if name in attributes
    }
    for name, count in counts.items():
        if not 1 <= count <= n:
            return Refusal(f"{name} {count} is out of range [1, {n}]")
    batch = attributes.get("batch_dimension_count", 0)
    if counts and not 0 <= batch < min(counts.values()):
        words = " and ".join(f"{name} {count}" for name, count in counts.items())
        return Refusal(f"batch_dimension_count {batch} is out of range [0, {min(counts.values())}) for {words}")
    return None


def standard_refusal(
    op: str, data_rank: int | None, indices_rank: int | None, axis: int = 0, batch_dims: int = 0
) -> Refusal | None:
    """Why the standard gather ``op`` takes ``axis`` (Gather and GatherElements: [-r, r)) or ``batch_dims``
    (GatherND: [0, min(r, q))) for no data of rank r and indices of rank q, as far as the ranks are known (None where
    one is not); None where it takes them."""
    r, q = data_rank, indices_rank
    if op != "GatherND":
        if r is not None and not -r <= axis < r:
            return Refusal(f"axis {axis} is out of range [{-r}, {r}) for data of rank {r}")
        return None
    ranks = {what: rank for what, rank in (("data", r), ("indices", q)) if rank is not None}
    if ranks and not 0 <= batch_dims < min(ranks.values()):
        words = " and ".join(f"{what} rank {rank}" for what, rank in ranks.items())
        return Refusal(f"batch_dims {batch_dims} is out of range [0, {min(ranks.values())}) for {words}")
    return None


def _stripped(sizes: Sequence) -> tuple:
    """Sizes without their leading 1s."""
    first = next((d for d, size in enumerate(sizes) if size != 1), len(sizes))
    return tuple(sizes[first:])


def _gather_unsafe(input: Sequence, indices: Sequence, axis: int, m: int) -> str | None:
    """Why DirectML is not safe on a DML_GATHER of these shapes, or None where it computes what ``predict`` says:
    outputs that crop index entries of C (DirectML takes them and corrupts its process's memory), and index sizes
    before the last ``m`` (``IndexDimensions``) that, without their leading 1s, do not start the input's sizes before
    ``axis`` without theirs (DirectML refuses most, takes some and its process then dies)."""
    n = len(input)
    if m - 1 > axis:
        return (
            f"DML_GATHER whose output crops index entries of C (index_dimensions {m} above axis {axis} + 1): "
            "DirectML takes it, then later operators in its process crash on a write to a wild address inside "
            "DirectML.dll (docs/semantics.md section 8)"
        )
    if not all(_known(size) for size in (*indices[: n - m], *input[:axis])):
        return None
    leading, batch = _stripped(indices[: n - m]), _stripped(input[:axis])
    if leading != batch[: len(leading)] or len(leading) > len(batch):
        return (
            f"DML_GATHER with index sizes {tuple(indices[: n - m])} before the last {m} that, without leading "
            f"1s, do not start the input's sizes before axis {axis}, {tuple(input[:axis])}: DirectML refuses most "
            "such descs, but takes some and its process then ends (docs/semantics.md section 8)"
        )
    return None


def gather_sizes(input: Sequence, indices: Sequence, attributes: Mapping[str, int], pad: object = 1) -> tuple | Refusal:
    """DML_GATHER (``axis``, ``index_dimensions`` m): the one output size DirectML takes, the last N entries of C
    (``gather_c``), whatever they crop; for m = 0, C is one short and ``pad`` comes before it (DirectML takes any
    size there). Where DirectML is not safe, an ``unsafe`` refusal."""
    axis, m = attributes.get("axis", 0), attributes.get("index_dimensions", 0)
    refused = _dimension_counts(input, indices) or attribute_refusal({"axis": axis, "index_dimensions": m}, len(input))
    if refused is not None:
        return refused
    n = len(input)
    c = gather_c(input, indices, axis, m)
    sizes = (pad,) * (n - len(c)) + c[max(len(c) - n, 0) :]
    unsafe = _gather_unsafe(input, indices, axis, m)
    return sizes if unsafe is None else Refusal(unsafe, sizes, unsafe=True)


def off_axis_difference(input: Sequence, indices: Sequence, axis: int) -> int | None:
    """The first dimension off ``axis`` where GatherElements' indices and input have known sizes that differ, which
    DirectML refuses, or None. Sizes of other lengths are a ValueError."""
    differ = [
        d
        for d, (a, b) in enumerate(zip(input, indices, strict=True))
        if d != axis and _known(a) and _known(b) and a != b
    ]
    return differ[0] if differ else None


def gather_elements_sizes(input: Sequence, indices: Sequence, attributes: Mapping[str, int]) -> tuple | Refusal:
    """DML_GATHER_ELEMENTS (``axis``): the indices' sizes, which off the axis must be the input's."""
    axis = attributes.get("axis", 0)
    refused = _dimension_counts(input, indices)
    if refused is not None:
        return refused
    sizes = tuple(indices)
    refused = attribute_refusal({"axis": axis}, len(input))
    if refused is not None:
        return replace(refused, stated=sizes)
    d = off_axis_difference(input, indices, axis)
    if d is not None:
        return Refusal(
            f"indices sizes {tuple(indices)} differ from input sizes {tuple(input)} on dimension {d} ({indices[d]} != "
            f"{input[d]}): DirectML refuses DML_GATHER_ELEMENTS unless they are equal off axis {axis} (CreateOperator "
            "0x80070057), and ONNX Runtime's DirectML provider fails such a GatherElements when it creates the "
            "session, or when it runs where the dims are dynamic (AbiCustomRegistry.cpp(519) 80070057)",
            sizes,
        )
    return sizes


def gather_nd_sizes(
    input: Sequence, indices: Sequence, attributes: Mapping[str, int], pad: object = 1
) -> tuple | Refusal:
    """DML_GATHER_ND1 (``input_dimension_count`` x, ``indices_dimension_count`` q, ``batch_dimension_count`` b):
    of the N sizes the last x of the input and q of the indices count (the rest must be 1s); the first b of those are
    batches; the indices' last size k, an integer, is the tuple length. The output is C (``gather_nd_c``)
    right-aligned to N after ``pad``s, nothing cropped: its batch sizes are the indices', which DirectML lets differ
    from the input's (section 3b)."""
    names = ("input_dimension_count", "indices_dimension_count", "batch_dimension_count")
    x, q, batch = (attributes.get(name, 0) for name in names)
    refused = _dimension_counts(input, indices)
    if refused is not None:
        return refused
    n = len(input)
    refused = attribute_refusal(dict(zip(names, (x, q, batch), strict=True)), n)
    if refused is not None:
        return refused
    c = gather_nd_c(input[n - x :], indices[n - q :], batch)
    stated = (pad,) * (n - len(c)) + c if len(c) <= n else None
    for name, count, sizes in (("input", x, input), ("indices", q, indices)):
        if any(_known(size) and size != 1 for size in sizes[: n - count]):
            return Refusal(
                f"{name} sizes {tuple(sizes)} with {name}_dimension_count {count} have leading sizes "
                f"{tuple(sizes[: n - count])}; the {n - count} irrelevant leading sizes must be 1",
                stated,
            )
    k = indices[-1]
    if not 1 <= k <= x - batch:
        return Refusal(
            f"index tuples of {k} coordinates (the indices' last size) do not fit the input's {x - batch} "
            f"dimensions after {batch} batch dimensions (1 to {x - batch})",
            stated,
        )
    if stated is None:
        return Refusal(f"output sizes {c} have {len(c)} dimensions, more than the dimension count {n}")
    return stated


def output_sizes(
    operator: str, input: Sequence, indices: Sequence, attributes: Mapping[str, int], pad: object = 1
) -> tuple | Refusal:
    """The output sizes by DirectML's operator name (``GATHER``, ``GATHER_ELEMENTS``, ``GATHER_ND``, ``GATHER_ND1``),
    or the refusal."""
    if operator == "GATHER_ELEMENTS":
        return gather_elements_sizes(input, indices, attributes)
    return (gather_sizes if operator == "GATHER" else gather_nd_sizes)(input, indices, attributes, pad)
