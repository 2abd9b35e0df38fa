"""Random gather descs over the whole domain DirectML takes and around it, for conformance against DirectML itself:
DML_GATHER, DML_GATHER_ELEMENTS, DML_GATHER_ND and DML_GATHER_ND1; 1 to 8 dimensions; the 11 data types and 4 index
types; packed, transposed, gapped and zero strides; totals with slack and alignments; index values in range, at the
edges and far out of bounds (beyond 32 bits, multiples of 2^32 that wrap); and a fifth of the cases changed in one
field DirectML checks (a type, a size, an axis, a count, a total), to hold its refusals too. Half the DML_GATHER
descs go beyond what ONNX Runtime's provider makes: index sizes other than 1 before the last ``IndexDimensions``,
crops of C beyond the input's leading 1s, a first output size above 1 for ``IndexDimensions`` 0; never the two
kinds DirectML is not safe on (docs/semantics.md section 8): other index sizes before the last ``IndexDimensions``,
which it takes now and then and dies on, and crops of index entries, which corrupt its process. Buffers hold random
bytes wherever the tensor has no element (padding, gaps, slack), so that what DirectML reads there shows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from onnx_gather.core import contract
from onnx_gather.core.contract import DATA_TYPE_NAMES, DIRECTML_DTYPES
from onnx_gather.core.descs import Case, TensorDesc, packed_strides

Rng = np.random.Generator
MAX_DESC_ELEMENTS = 400  # per tensor
OPERATOR_WEIGHTS = {"GATHER": 0.4, "GATHER_ELEMENTS": 0.25, "GATHER_ND1": 0.25, "GATHER_ND": 0.1}


def _itemsize(dtype: str) -> int:
    return np.dtype(DIRECTML_DTYPES[dtype]).itemsize


def _sizes(rng: Rng, count: int, budget: int = MAX_DESC_ELEMENTS) -> list[int]:
    sizes = [int(rng.choice([1, 1, 2, 2, 3, 3, 4, 5, 7])) for _ in range(count)]
    while math.prod(sizes) > budget:
        sizes[int(rng.integers(0, count))] = 1
    return sizes


def _strides(rng: Rng, sizes: tuple[int, ...], output: bool) -> tuple[int, ...] | None:
    """None (packed), packed written out, transposed, with gaps, with zeros (broadcast), or any small numbers."""
    kinds = ["none", "none", "packed", "transposed", "gaps", "gaps transposed"]
    kinds += [] if output else ["zero", "random"]
    kind = kinds[int(rng.integers(len(kinds)))]
    if kind == "none":
        return None
    order = list(range(len(sizes)))
    if "transposed" in kind:
        rng.shuffle(order)
    padded = [size + (int(rng.integers(0, 3)) if "gaps" in kind else 0) for size in sizes]
    steps, step = [0] * len(sizes), int(rng.integers(1, 4)) if "gaps" in kind and rng.random() < 0.3 else 1
    for d in reversed(order):
        steps[d] = step
        step *= padded[d]
    if kind == "zero":
        steps = [0 if rng.random() < 0.4 else s for s in steps]
    elif kind == "random":
        steps = [int(rng.choice([0, 1, 2, 3, 4, 5, 7, 9, 16, 33])) for _ in sizes]
    return tuple(steps)


def _desc(rng: Rng, dtype: str, sizes: list[int], output: bool = False, layout: bool = True) -> TensorDesc:
    """A desc of these sizes: with ``layout``, random strides, slack and alignment; else as ONNX Runtime's provider
    lays a tensor out (``TensorDesc.provider``), which the custom ops read through too."""
    if 0 in sizes:
        return TensorDesc.of(dtype, sizes)
    if not layout:
        return TensorDesc.provider(dtype, sizes)
    steps = _strides(rng, tuple(sizes), output)
    desc = TensorDesc.of(dtype, sizes, steps)
    slack = int(rng.integers(1, 17)) if rng.random() < 0.35 else int(rng.integers(17, 200)) if rng.random() < 0.1 else 0
    alignment = int(rng.choice([16, 32, 256, 4096])) if rng.random() < 0.1 else 0
    return TensorDesc(dtype, desc.sizes, steps, desc.total_bytes + slack, alignment)


def _out_of_bounds(rng: Rng, size: int, stride: int, index_type: str) -> int:
    """An index value outside the dimension: near its edges, at the 32-bit limits, beyond 32 bits, or a multiple of
    2^32 / gcd(stride, 2^32) plus a small value (its offset wraps back into the tensor)."""
    period = 2**32 // math.gcd(max(stride, 1), 2**32)
    wrap = period * int(rng.integers(1, max(2**32 // period, 2) + 1)) + int(rng.integers(0, size))
    choices = [
        size,
        size + 1,
        size + int(rng.integers(2, 50)),
        2**31 - 1,
        2**31,
        2**32 - 1,
        2**32 - size,
        wrap,
        -wrap,
        -size - 1,
        -(2**31),
        2**32 + int(rng.integers(0, 2 * size + 2)),
        2**40 + 3,
        -(2**63),
        2**63 + int(rng.integers(0, size + 1)),
        2**64 - 1 - int(rng.integers(0, size)),
    ]
    return int(rng.choice(choices))


def _index_values(rng: Rng, count: int, sizes: list[int], strides: list[int], index_type: str) -> np.ndarray:
    """``count`` index values, cycling over dimensions of ``sizes`` (an ND tuple's; one for the other operators):
    in range (negative too for signed types), out of bounds at a random rate. Stored as the type stores them."""
    bits = 8 * _itemsize(index_type)
    signed = index_type.startswith("INT")
    rate = float(rng.choice([0.0, 0.0, 0.1, 0.3, 1.0]))
    values = []
    for k in range(count):
        size, stride = sizes[k % len(sizes)], strides[k % len(sizes)]
        if rng.random() < rate:
            value = _out_of_bounds(rng, size, stride, index_type)
        else:
            value = int(rng.integers(-size if signed and rng.random() < 0.5 else 0, size))
        value %= 2**bits
        values.append(value - 2**bits if signed and value >= 2 ** (bits - 1) else value)
    return np.array(values, dtype=object).astype(DIRECTML_DTYPES[index_type])


def _buffer(rng: Rng, desc: TensorDesc, values: np.ndarray | None) -> bytes:
    """Random bytes, with ``values`` (in row-major order) where the desc puts its elements."""
    buffer = rng.integers(0, 256, desc.total_bytes, dtype=np.uint8)
    if values is not None and 0 not in desc.sizes:
        size = desc.itemsize
        steps = desc.steps
        coordinates = np.indices(desc.sizes).reshape(len(desc.sizes), -1).T
        offsets = (coordinates * np.array(steps)).sum(axis=1) * size
        raw = np.ascontiguousarray(values).view(np.uint8).reshape(-1, size)
        inside = offsets + size <= desc.total_bytes  # a total made too small holds fewer
        for byte in range(size):
            buffer[offsets[inside] + byte] = raw[inside, byte]
    return buffer.tobytes()


def _gather(rng: Rng, n: int) -> tuple[dict, list[int], list[int], list[int], list[int]]:
    """DML_GATHER as ONNX Runtime's provider makes it, or half the time beyond it (``_wider_gather``)."""
    if rng.random() < 0.5:
        return _wider_gather(rng, n)
    return _provider_gather(rng, n)


def _wider_gather(rng: Rng, n: int) -> tuple[dict, list[int], list[int], list[int], list[int]]:
    """DML_GATHER with any input sizes and axis: the index sizes before the last ``index_dimensions`` m, without
    leading 1s, a start of the input's before the axis, the output the last N entries of C, whatever input sizes they
    crop (never index entries: m - 1 <= axis), or for m = 0 any first size before C."""
    axis = int(rng.integers(0, n))
    m = int(rng.integers(0, axis + 2))  # never m - 1 > axis: crops of index entries corrupt DirectML's process
    xs = _sizes(rng, n)
    batch = xs[:axis][next((d for d, size in enumerate(xs[:axis]) if size != 1), axis) :]
    lead = batch[: int(rng.integers(0, min(len(batch), n - m) + 1))]
    js = [1] * (n - m - len(lead)) + lead + _sizes(rng, m, 60)
    c = [*xs[:axis], *js[n - m :], *xs[axis + 1 :]]
    first = [int(rng.choice([1, 2, 3]))] if len(c) < n else []
    return {"axis": axis, "index_dimensions": m}, xs, js, first + c[len(c) - n + len(first) :], [axis]


def _provider_gather(rng: Rng, n: int) -> tuple[dict, list[int], list[int], list[int], list[int]]:
    """DML_GATHER with index sizes 1 before the last ``index_dimensions`` m (0 to N) and an input of r dimensions
    padded with N - r leading 1s, which the output crops where C is longer than N (as ONNX Runtime's provider makes
    them): attributes, the three sizes, and the input dimension the index values address."""
    m = int(rng.integers(0, n + 1))
    r = int(rng.integers(1, n - max(m - 1, 0) + 1))  # C has N + m - 1 entries: the m - 1 cropped are padding 1s
    axis = int(rng.integers(n - r, n))
    xs = [1] * (n - r) + _sizes(rng, r)
    js = [1] * (n - m) + _sizes(rng, m, 100) if m else [1] * n
    c = [*xs[:axis], *js[n - m :], *xs[axis + 1 :]]
    os_ = [1] * (n - len(c)) + c[max(len(c) - n, 0) :]
    return {"axis": axis, "index_dimensions": m}, xs, js, os_, [axis]


def _elements(rng: Rng, n: int) -> tuple[dict, list[int], list[int], list[int], list[int]]:
    axis = int(rng.integers(0, n))
    xs = _sizes(rng, n)
    js = list(xs)
    js[axis] = int(rng.choice([1, 1, 2, 3, 4, 6]))
    return {"axis": axis}, xs, js, list(js), [axis]


def _nd(rng: Rng, n: int, batched: bool) -> tuple[dict, list[int], list[int], list[int], list[int]]:
    while True:
        input_count, indices_count = int(rng.integers(1, n + 1)), int(rng.integers(1, n + 1))
        batch = int(rng.integers(0, min(input_count, indices_count))) if batched else 0
        k = int(rng.integers(1, input_count - batch + 1))
        if indices_count - 1 + input_count - batch - k <= n:
            break
    data, index = _sizes(rng, input_count), _sizes(rng, indices_count, 200)
    if batch:  # the indices' batch sizes: the input's, or others (DirectML takes those too)
        index[:batch] = data[:batch] if rng.random() < 0.6 else _sizes(rng, batch, 20)
    index[-1] = k
    attributes = {"input_dimension_count": input_count, "indices_dimension_count": indices_count}
    if batched:
        attributes["batch_dimension_count"] = batch
    meaning = [*index[:-1], *data[batch + k :]]
    xs, js, os_ = [1] * (n - input_count) + data, [1] * (n - indices_count) + index, [1] * (n - len(meaning)) + meaning
    return attributes, xs, js, os_, [n - input_count + batch + c for c in range(k)]


def _change(rng: Rng, operator: str, attributes: dict, sizes: list[list[int]], types: list[str]) -> str:
    """Change one field DirectML checks (most such changes make it refuse the case); returns which."""
    n = len(sizes[0])
    change = str(
        rng.choice(
            [
                "index type",
                "output type",
                "output size",
                "dimension count",
                "attribute",
                "zero size",
                "total",
                "alignment",
            ]
        )
    )
    if change == "index type":
        types[1] = str(rng.choice(DATA_TYPE_NAMES))
    elif change == "output type":
        types[2] = str(rng.choice(DATA_TYPE_NAMES))
    elif change == "output size":
        sizes[2][int(rng.integers(0, n))] = int(rng.choice([1, 2, 3, 5]))
    elif change == "dimension count":
        which = sizes[int(rng.integers(0, 3))]
        if len(which) > 1 and rng.random() < 0.5:
            del which[0]
        else:
            which.insert(0, 1)
    elif change == "attribute":
        name = str(rng.choice(sorted(attributes)))
        attributes[name] = int(rng.choice([n + 1, 9, 2**32 - 1] if operator == "GATHER" else [n, n + 1, 9, 2**32 - 1]))
    elif change == "zero size":
        which = sizes[int(rng.integers(0, 3))]
        which[int(rng.integers(0, len(which)))] = 0
    return change


def random_case(rng: Rng, data_types: Sequence[str] = DATA_TYPE_NAMES) -> Case:
    """One random case (see the module's docstring) of one of ``data_types``."""
    operator = str(rng.choice(list(OPERATOR_WEIGHTS), p=list(OPERATOR_WEIGHTS.values())))
    n = int(rng.choice(np.arange(1, 9), p=[0.08, 0.16, 0.17, 0.17, 0.13, 0.11, 0.09, 0.09]))
    types = [str(rng.choice(data_types)), str(rng.choice(contract.INDEX_TYPE_NAMES))]
    types.append(types[0])
    if operator == "GATHER":
        attributes, xs, js, os_, dims = _gather(rng, n)
    elif operator == "GATHER_ELEMENTS":
        attributes, xs, js, os_, dims = _elements(rng, n)
    else:
        attributes, xs, js, os_, dims = _nd(rng, n, operator == "GATHER_ND1")
    sizes = [xs, js, os_]
    change = _change(rng, operator, attributes, sizes, types) if rng.random() < 0.2 else ""
    layout = rng.random() < 0.6  # else every desc as ONNX Runtime's provider makes it from an ONNX tensor
    x = _desc(rng, types[0], sizes[0], layout=layout)
    j = _desc(rng, types[1], sizes[1], layout=layout)
    o = _desc(rng, types[2], sizes[2], output=True, layout=layout)
    if change == "total":
        desc = [x, j, o][int(rng.integers(0, 3))]
        smaller = TensorDesc(desc.dtype, desc.sizes, desc.strides, max(desc.total_bytes - int(rng.integers(1, 9)), 0))
        x, j, o = (smaller if d is desc else d for d in (x, j, o))
    elif change == "alignment":
        desc = [x, j, o][int(rng.integers(0, 3))]
        odd = TensorDesc(desc.dtype, desc.sizes, desc.strides, desc.total_bytes, int(rng.choice([1, 2, 4, 8, 24])))
        x, j, o = (odd if d is desc else d for d in (x, j, o))
    data = rng.integers(0, 256, math.prod(x.sizes) * x.itemsize, dtype=np.uint8).view(DIRECTML_DTYPES[x.dtype])
    values = None
    addressed = [(xs[d], packed_strides(tuple(xs))[d]) for d in dims if d < len(xs)]
    if j.dtype in contract.INDEX_TYPE_NAMES and 0 not in j.sizes and addressed and all(size for size, _ in addressed):
        sizes_of, strides_of = [size for size, _ in addressed], [step for _, step in addressed]
        values = _index_values(rng, math.prod(j.sizes), sizes_of, strides_of, j.dtype)
    fill = int(rng.choice([0xCD, 0x00, 0xFF, int(rng.integers(0, 256))]))
    input_bytes = _buffer(rng, x, data if layout else None) if layout else _padded(x, data)
    indices_bytes = _buffer(rng, j, values) if layout else _padded(j, values)
    return Case(operator, attributes, x, j, o, input_bytes, indices_bytes, fill)


def _padded(desc: TensorDesc, values: np.ndarray | None) -> bytes:
    """A tensor as ONNX Runtime holds it: its elements in row-major order, then zeros up to the total."""
    buffer = bytearray(desc.total_bytes)
    if values is not None:
        raw = np.ascontiguousarray(values).view(np.uint8).tobytes()[: desc.total_bytes]
        buffer[: len(raw)] = raw
    return bytes(buffer)


def random_cases(seed: int, count: int, data_types: Sequence[str] = DATA_TYPE_NAMES) -> list[Case]:
    """``count`` random cases from ``seed``, their data of ``data_types`` (all 11 by default)."""
    rng = np.random.default_rng(seed)
    return [random_case(rng, data_types) for _ in range(count)]
