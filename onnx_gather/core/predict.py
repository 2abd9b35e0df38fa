"""What DirectML computes for a gather operator desc: DML_GATHER, DML_GATHER_ELEMENTS, DML_GATHER_ND and
DML_GATHER_ND1 over buffer tensor descs (sizes, strides, TotalTensorSizeInBytes, alignment) and the buffers' bytes,
as measured on DirectML 1.15.4 called directly (docs/semantics.md section 8 states the rules with examples).

``predict(case)`` is the outcome DirectML gives: the refusal at operator creation (``REFUSED``), or the whole output
buffer, the bytes DirectML leaves alone keeping the case's fill. ``NotPredicted`` says where no rule was found.
This module imports no runtime; ``onnx_gather.conformance.direct_door`` holds it against DirectML itself.
"""

from __future__ import annotations

import math

import numpy as np

from onnx_gather.core.contract import INDEX_TYPE_NAMES
from onnx_gather.core.descs import Case, DescOutcome, TensorDesc
from onnx_gather.core.sizes import MAX_DIMENSION_COUNT, Refusal, output_sizes

REFUSED = DescOutcome("create 0x80070057", None)  # every refusal: CreateOperator returns E_INVALIDARG
_WORD = np.uint64(0xFFFFFFFF)


class NotPredicted(Exception):
    """A desc whose result no measured rule predicts; the message says why."""


def _desc_refusal(desc: TensorDesc) -> str | None:
    """DirectML's checks of one tensor desc alone."""
    if not 1 <= len(desc.sizes) <= MAX_DIMENSION_COUNT:
        return f"{len(desc.sizes)} dimensions (1 to {MAX_DIMENSION_COUNT})"
    if 0 in desc.sizes:
        return f"a size of 0 in {desc.sizes}"
    if desc.alignment != 0 and (desc.alignment < 16 or desc.alignment & (desc.alignment - 1)):
        return f"base offset alignment {desc.alignment} (0 or a power of two of at least 16)"
    needed = -(-desc.extent // 4) * 4
    if desc.total_bytes < needed:
        return f"TotalTensorSizeInBytes {desc.total_bytes}, below the extent rounded up to 4 bytes ({needed})"
    return None


def _output_overlap(desc: TensorDesc) -> str | None:
    """DirectML's check against an output writing an address twice (not exact: some overlaps pass it)."""
    steps = [step for size, step in zip(desc.sizes, desc.steps, strict=True) if size > 1]
    if 0 in steps:
        return "an output stride of 0 on a dimension of size above 1"
    if len(set(steps)) != len(steps):
        return "two output dimensions of size above 1 with equal strides"
    if desc.extent // desc.itemsize < math.prod(desc.sizes):
        return "an output extent below its element count"
    return None


def _nd_sizes(case: Case) -> tuple[tuple[int, ...], tuple[int, ...]]:
    n = len(case.input.sizes)
    x, q = case.attributes["input_dimension_count"], case.attributes["indices_dimension_count"]
    return tuple(case.input.sizes[n - x :]), tuple(case.indices.sizes[n - q :])


def refusal(case: Case) -> str | None:
    """Why DirectML refuses ``case`` when it creates the operator, or None if it takes it."""
    for role, desc in (("input", case.input), ("indices", case.indices), ("output", case.output)):
        reason = _desc_refusal(desc)
        if reason:
            return f"{role}: {reason}"
    n = len(case.input.sizes)
    if len(case.indices.sizes) != n or len(case.output.sizes) != n:
        return f"dimension counts differ: input {n}, indices {len(case.indices.sizes)}, output {len(case.output.sizes)}"
    if case.indices.dtype not in INDEX_TYPE_NAMES:
        return f"indices of type {case.indices.dtype} ({', '.join(INDEX_TYPE_NAMES)})"
    if case.output.dtype != case.input.dtype:
        return f"output type {case.output.dtype} unlike the input's {case.input.dtype}"
    pad = case.output.sizes[0] if case.operator == "GATHER" else 1  # DML_GATHER takes any size before a short C
    sizes = output_sizes(case.operator, case.input.sizes, case.indices.sizes, case.attributes, pad)
    if isinstance(sizes, Refusal):
        if sizes.unsafe:
            raise NotPredicted(sizes.reason)
        return sizes.reason
    if tuple(case.output.sizes) != tuple(sizes):
        return f"output sizes {case.output.sizes}, not {tuple(sizes)}"
    return _output_overlap(case.output)


def _elements(desc: TensorDesc, data: bytes, offsets: np.ndarray) -> np.ndarray:
    """The elements at these element offsets of a buffer (each wholly within it), as unsigned integers."""
    raw = np.frombuffer(data, np.uint8)
    size = desc.itemsize
    return raw[: len(raw) // size * size].view(f"<u{size}")[offsets.astype(np.intp)]


def _words(case: Case, coordinates: np.ndarray, size: int, component: int = -1) -> np.ndarray:
    """The coordinate each index value becomes (32-bit words as uint64): the value's low 32 bits, plus the
    dimension's ``size`` when its top bit is set (INT32, INT64 and UINT64 alike; UINT32 never), wrapping.
    ``coordinates`` are the indices' own (rows of N); ``component`` replaces their last one (an ND tuple's)."""
    if component >= 0:
        coordinates = coordinates.copy()
        coordinates[:, -1] = component
    offsets = (coordinates.astype(np.uint64) * np.array(case.indices.steps, np.uint64)).sum(axis=1)
    inside = offsets < np.uint64(case.indices.total_bytes // case.indices.itemsize)  # past the total: 0, unclamped
    raw = np.where(inside, _elements(case.indices, case.indices_bytes, np.where(inside, offsets, 0)), 0)
    raw = raw.astype(np.uint64)
    words = raw & _WORD
    if case.indices.dtype != "UINT32":
        negative = (raw >> np.uint64(8 * case.indices.itemsize - 1)) & np.uint64(1)
        words = np.where(negative == 1, (words + np.uint64(size)) & _WORD, words)
    return words


def _read(case: Case, offsets: np.ndarray) -> np.ndarray:
    """What DirectML reads at these element offsets (32-bit words): clamped to ceil(total / element size) - 1, from
    the buffer as it is; an element reaching past the total reads 0."""
    size = case.input.itemsize
    clamped = np.minimum(offsets, np.uint64(-(-case.input.total_bytes // size) - 1))
    whole = case.input.total_bytes // size
    values = _elements(case.input, case.input_bytes, np.minimum(clamped, np.uint64(max(whole - 1, 0))))
    return np.where(clamped < np.uint64(whole), values, 0).astype(values.dtype)


def _gather_offsets(case: Case, out: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """DML_GATHER (measured): output dimension k is entry ``k + len(C) - N`` of C, the cropped entries' coordinates
    0; for m = 0 the first output dimension, before C, steps the input (``_virtual_step``). The index is read at
    the C coordinates of the last m index dimensions, except that the index dimensions before them, from the first
    that is not 1, take the coordinates of consecutive output dimensions from the first that is not 1, in place of
    what those output dimensions would give."""
    n, axis, m = len(case.input.sizes), case.attributes["axis"], case.attributes["index_dimensions"]
    shift = m - 1  # C is N + m - 1 long
    offsets = np.zeros(len(out), np.uint64)
    at = np.zeros((len(out), n), np.uint64)  # the index's coordinates
    for k in range(n):
        p = k + shift
        if p < 0:  # m = 0: the first output dimension
            offsets += out[:, k] * np.uint64(_virtual_step(case))
        elif p < axis:
            offsets += out[:, k] * steps[p]
        elif p < axis + m:
            at[:, n - m + p - axis] = out[:, k]
        else:
            offsets += out[:, k] * steps[p - m + 1]
    first = next((d for d in range(n - m) if case.indices.sizes[d] != 1), n - m)
    start = next((k for k in range(n) if case.output.sizes[k] != 1), n)
    for d, k in zip(range(first, n - m), range(start, n), strict=False):
        p = k + shift
        if axis <= p < axis + m:
            at[:, n - m + p - axis] = 0
        at[:, d] = out[:, k]
    return offsets + _words(case, at, case.input.sizes[axis]) * steps[axis]


def _virtual_step(case: Case) -> int:
    """The input step of the first output dimension of an m = 0 DML_GATHER, before C. DirectML pads the tensors to 4
    or 8 dimensions with leading 1s: packed (NULL) strides give such a dimension the element count as its stride,
    strides given give it 0, and at 4 and 8 dimensions there is none (measured: 346 of 346 descs)."""
    n = len(case.input.sizes)
    return 0 if n in (4, 8) or case.input.strides is not None else math.prod(case.input.sizes)


def _elements_offsets(case: Case, out: np.ndarray, steps: np.ndarray) -> np.ndarray:
    axis = case.attributes["axis"]
    words = _words(case, out, case.input.sizes[axis])
    if case.input.sizes[axis] == 1:  # GATHER_ELEMENTS reads coordinate 0 on an axis of size 1, whatever the stride
        words = np.zeros_like(words)
    return (np.delete(out, axis, axis=1) * np.delete(steps, axis)).sum(axis=1) + words * steps[axis]


def _nd_offsets(case: Case, out: np.ndarray, steps: np.ndarray) -> np.ndarray:
    n = len(case.input.sizes)
    data, index = _nd_sizes(case)
    batch, k = case.attributes.get("batch_dimension_count", 0), index[-1]
    first = n - len(data)  # the input's first meaningful dimension
    tuple_dims = len(index) - 1
    lead = n - (tuple_dims + len(data) - batch - k)  # where the output's tuple coordinates start
    positions = out[:, lead : lead + tuple_dims]  # the tuple's position in the indices, batches first
    at = np.zeros((len(out), n), np.uint64)
    at[:, n - len(index) : n - 1] = positions
    offsets = (positions[:, :batch] * steps[first : first + batch]).sum(axis=1)
    for c in range(k):
        words = _words(case, at, data[batch + c], component=c)
        offsets = offsets + words * steps[first + batch + c]
    inner = out[:, lead + tuple_dims :]
    return offsets + (inner * steps[first + batch + k :]).sum(axis=1)


def out_of_bounds(case: Case) -> bool:
    """Whether an accepted case has an index value outside ``[-size, size)`` of its dimension (``[0, size)`` for
    UINT32; a UINT64 value with its top bit set counts as negative, as DirectML reads it), or an ND1 indices batch
    size above the input's."""
    n = len(case.indices.sizes)
    at = np.indices(case.indices.sizes, np.uint64).reshape(n, -1).T
    offsets = (at * np.array(case.indices.steps, np.uint64)).sum(axis=1)
    raw = _elements(case.indices, case.indices_bytes, offsets)
    values = raw.astype(np.uint64).astype(object)
    bits = 8 * case.indices.itemsize
    if case.indices.dtype != "UINT32":
        values = np.array([v - 2**bits if v >= 2 ** (bits - 1) else v for v in values], dtype=object)
    if case.operator in ("GATHER", "GATHER_ELEMENTS"):
        sizes = [case.input.sizes[case.attributes["axis"]]]
    else:
        data, index = _nd_sizes(case)
        batch = case.attributes.get("batch_dimension_count", 0)
        if any(j > d for j, d in zip(index[:batch], data[:batch], strict=True)):
            return True
        sizes = list(data[batch : batch + index[-1]])
    limits = np.resize(np.array(sizes, dtype=object), len(values))
    low = 0 if case.indices.dtype == "UINT32" else -limits
    return bool(((values < low) | (values >= limits)).any())


_OFFSETS = {
    "GATHER": _gather_offsets,
    "GATHER_ELEMENTS": _elements_offsets,
    "GATHER_ND": _nd_offsets,
    "GATHER_ND1": _nd_offsets,
}


def _positions(sizes: tuple[int, ...]) -> np.ndarray:
    """Every coordinate of a tensor of ``sizes``, row-major, one row each (uint64)."""
    return np.indices(sizes, np.uint64).reshape(len(sizes), -1).T


def element_offsets(case: Case, out: np.ndarray | None = None) -> np.ndarray:
    """For each output position of ``out`` (rows of coordinates; all of them, row-major, by default), the input element
    offset DirectML reads (32-bit words, before the clamp to the tensor's memory), for a case it takes."""
    out = _positions(case.output.sizes) if out is None else out
    return _OFFSETS[case.operator](case, out, np.array(case.input.steps, np.uint64)) & _WORD


def predict(case: Case) -> DescOutcome:
    """The outcome DirectML gives for ``case``: ``REFUSED``, or the whole output buffer."""
    if refusal(case) is not None:
        return REFUSED
    if max(case.input.total_bytes, case.indices.total_bytes, case.output.total_bytes) >= 2**32:
        raise NotPredicted("a buffer of 4 GiB or more (never measured)")
    out = _positions(case.output.sizes)
    values = _read(case, element_offsets(case, out))
    buffer = np.full(case.output.total_bytes, case.fill, np.uint8)
    at = (out * np.array(case.output.steps, np.uint64)).sum(axis=1).astype(np.intp)
    order = np.argsort(at, kind="stable")
    shared = at[order][1:] == at[order][:-1]
    if shared.any() and (values[order][1:][shared] != values[order][:-1][shared]).any():
        raise NotPredicted("output positions sharing an address get different values: a race between GPU threads")
    size = case.output.itemsize
    buffer[: len(buffer) // size * size].view(f"<u{size}")[at] = values
    return DescOutcome(None, buffer.tobytes())
