"""Where a standard gather or scatter sits in DML form: the one home of the DML form's geometry (docs/semantics.md
sections 1 to 3b, 6 and 10). The converter pads by it, the lowering takes its ones away by it, and the conformance
harness predicts by it."""

from __future__ import annotations

from dataclasses import dataclass

from onnx_gather.core.errors import UserError
from onnx_gather.core.sizes import MAX_DIMENSION_COUNT, output_rank, standard_refusal


class FormError(UserError):
    """A standard gather that DML form cannot express: the message says why, in one line."""


@dataclass(frozen=True)
class DmlForm:
    """One standard gather or scatter in DML form: the DML node's dimension count N, the standard ranks of its inputs
    and of its output (each gets ``N - rank`` leading ones of size 1), its axis and the standard op's attributes."""

    op: str  # the standard op: Gather, GatherElements, GatherND, ScatterElements, Scatter or ScatterND
    dimension_count: int
    ranks: tuple[int, ...]  # the standard ranks of data, indices (and a scatter's updates)
    output_rank: int
    axis: int  # the DML node's axis, 0 to N-1 (GatherND and ScatterND, which have none: 0)
    batch_dimension_count: int = 0  # GatherND's batch_dims
    tuple_length: int = 0  # GatherND's and ScatterND's index tuple length, the indices' last size

    def ones(self, rank: int) -> int:
        """The leading ones a tensor of standard ``rank`` gets to N dimensions."""
        return self.dimension_count - rank

    @property
    def input_ones(self) -> int:
        return self.ones(self.ranks[0])

    @property
    def indices_ones(self) -> int:
        return self.ones(self.ranks[1])

    @property
    def output_ones(self) -> int:
        return self.ones(self.output_rank)

    @property
    def attributes(self) -> dict[str, int]:
        """The DML node's integer attributes (``core.contract``'s names)."""
        if self.op in ("GatherND", "ScatterND"):
            counts = {"input_dimension_count": self.ranks[0], "indices_dimension_count": self.ranks[1]}
            return {**counts, "batch_dimension_count": self.batch_dimension_count} if self.op == "GatherND" else counts
        if self.op == "Gather":
            return {"axis": self.axis, "index_dimensions": self.ranks[1]}
        return {"axis": self.axis}


def dml_form(
    op: str,
    data_rank: int,
    indices_rank: int,
    axis: int = 0,
    batch_dims: int = 0,
    tuple_length: int = 0,
    dimension_count: int | None = None,
) -> DmlForm:
    """Standard gather ``op`` (Gather, GatherElements or GatherND) of data of rank ``data_rank`` r and indices of
    rank ``indices_rank`` q in DML form, or ``FormError`` saying why it has none. The rules:

    1. Gather and GatherElements take an ``axis`` in ``[-r, r)``; a negative one counts from the end. GatherElements
       takes indices of rank r only. GatherND takes ``batch_dims`` in ``[0, min(r, q))`` and index tuples of
       ``tuple_length`` k (the indices' last size) from 1 to ``r - batch_dims``.
    2. The standard output's rank is ``core.sizes.output_rank``: Gather ``r + q - 1`` (scalar indices: ``r - 1``),
       GatherElements r, GatherND ``(q - 1) + (r - batch_dims - k)`` (k = r: the indices' leading dims only).
    3. The dimension count N is ``dimension_count`` where given (``to_dml`` takes 1 to 8, 4 emulating DirectML's
       feature levels below 3.0; the lowering gives a DML node's), else the least that holds every tensor: the
       largest of r, q and the output's rank, as ONNX Runtime's DirectML provider chooses it.
    4. A gather whose largest rank is above N, or that would need more than DirectML's 8 dimensions, has no DML
       form (nothing is cropped).
    5. Input, indices and output each get ``N - rank`` leading ones (right alignment, semantics.md section 1); the
       DML output is the standard output with its leading ones.
    6. The DML axis is the non-negative axis moved by the input's leading ones; GatherND has none (0).
    7. Gather's ``index_dimensions`` is q; GatherND's ``input_dimension_count`` is r, ``indices_dimension_count`` q,
       ``batch_dimension_count`` its ``batch_dims`` (``DmlForm.attributes``).
    """
    r, q = data_rank, indices_rank
    refused = standard_refusal(op, r, q, axis, batch_dims)
    if refused is not None:
        raise FormError(refused.reason)
    if op == "GatherND":
        if not 1 <= tuple_length <= r - batch_dims:
            raise FormError(
                f"index tuples of {tuple_length} coordinates do not fit data of rank {r} with batch_dims {batch_dims}"
            )
    else:
        if op == "GatherElements" and q != r:
            raise FormError(f"indices rank {q} differs from data rank {r}")
        batch_dims = tuple_length = 0
    out = output_rank(op, r, q, batch_dims, tuple_length)
    needed = max(r, q, out)
    if dimension_count is None and needed > MAX_DIMENSION_COUNT:
        raise FormError(f"it needs {needed} dimensions, more than DirectML's {MAX_DIMENSION_COUNT}")
    n = dimension_count or needed
    if needed > n:
        raise FormError(f"it needs {needed} dimensions, more than the dimension count {n}")
    dml_axis = 0 if op == "GatherND" else axis % r + n - r
    return DmlForm(op, n, (r, q), out, dml_axis, batch_dims, tuple_length)


def scatter_form(
    op: str,
    ranks: tuple[int, int, int],
    axis: int = 0,
    tuple_length: int | str | None = 0,
    dimension_count: int | None = None,
) -> DmlForm:
    """Standard scatter ``op`` (ScatterElements, Scatter or ScatterND) of data, indices and updates of ``ranks`` in
    DML form, or ``FormError`` saying why it has none. The rules:

    1. ScatterND's index tuples (the indices' last dim, ``tuple_length``) have 1 to r coordinates; N is at least the
       largest of the three ranks (``DmlScatterNd`` counts the input's and the indices' own ranks).
    2. ScatterElements' and Scatter's ``axis`` is taken modulo r; N is at least r.
    3. N is ``dimension_count`` where given, else that least; at most DirectML's 8. The data, indices, updates and
       output each get ``N - rank`` leading ones; the output has the data's rank. The DML axis is the non-negative
       axis moved by the data's leading ones.
    """
    r = ranks[0]
    if op == "ScatterND":
        k = tuple_length
        if not isinstance(k, int) or not 1 <= k <= r:
            length = f"the last dim of indices, {k or '?'}"
            raise FormError(f"its index tuples' length ({length}) is not 1 to the data's rank")
        least, axis = max(ranks), 0
    else:
        least, tuple_length = r, 0
    n = dimension_count or least
    if not least <= n <= MAX_DIMENSION_COUNT:
        raise FormError(f"it needs {least} dimensions, DML form here {n} (at most {MAX_DIMENSION_COUNT})")
    dml_axis = 0 if op == "ScatterND" else axis % r + n - least
    return DmlForm(op, n, ranks, r, dml_axis, 0, tuple_length)
