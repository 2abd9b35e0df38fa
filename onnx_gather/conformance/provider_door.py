"""Conformance against real DirectML: random standard gathers, packed many to a model, run on DirectML, compared bit
for bit with ``onnx_gather.core.semantics`` and with the custom ops in ONNX Runtime.

Each case is one ONNX ``Gather``, ``GatherElements`` or ``GatherND`` node with its own data and indices as graph
inputs (never initializers, which ONNX Runtime could fold on the CPU). Its expected value comes from the DML form the
converter makes of it (``core.form.dml_form``): data and indices padded with their leading ones to ``N``, the DML
node's attributes, and the output without its leading ones.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime
from onnx import helper

from onnx_gather.core import contract, semantics
from onnx_gather.core.form import FormError, dml_form
from onnx_gather.directml.worker import Runner
from onnx_gather.graphs.convert import to_dml
from onnx_gather.graphs.lowering.lower import to_onnx
from onnx_gather.runtime.ops import InferenceSession

# The 12 data types of the harness, as DirectML's tables name them: DirectML's 11 and BOOL.
HARNESS_DTYPES = {**contract.DIRECTML_DTYPES, "BOOL": np.dtype(np.bool_)}
ALL = tuple(HARNESS_DTYPES)
STANDARD_INDEX_DTYPES = (np.int32, np.int64)  # what ONNX's Gather and GatherElements take
MAX_CASE_ELEMENTS = 2048  # per tensor, so that a model of hundreds of cases stays small
CASES_PER_MODEL = 250
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def type_name(dtype: np.dtype) -> str:
    """DirectML's name of a numpy type (FLOAT32, BOOL, ...)."""
    return next(name for name, t in HARNESS_DTYPES.items() if np.dtype(t) == np.dtype(dtype))


@dataclass(frozen=True)
class GatherCase:
    """One standard gather: ``op`` with ``axis`` as written on the node (possibly negative); for GatherND,
    ``axis`` is 0 and ``batch`` its batch_dims."""

    op: str
    data: np.ndarray
    indices: np.ndarray
    axis: int
    batch: int = 0

    @property
    def size(self) -> int:
        """The size of the gathered axis."""
        return self.data.shape[self.axis]

    @property
    def out_of_bounds(self) -> int:
        """How many index values (GatherND: tuple coordinates) lie outside ``[-size, size)`` of their dimension."""
        if self.op == "GatherND":
            return semantics.count_out_of_bounds_nd(
                self.data, self.indices, self.data.ndim, self.indices.ndim, self.batch
            )
        return semantics.count_out_of_bounds(self.indices, self.size)

    @property
    def beyond_int32(self) -> bool:
        """Whether an index value does not fit int32 (GPUs with 64-bit shader integers may read those differently)."""
        wide = self.indices.astype(np.int64)
        return bool(((wide < INT32_MIN) | (wide > INT32_MAX)).any())

    def describe(self) -> str:
        how = f"batch_dims {self.batch}" if self.op == "GatherND" else f"axis {self.axis}"
        return (
            f"{self.op} {how}, {type_name(self.data.dtype)} data {self.data.shape}, "
            f"{self.indices.dtype.name} indices {self.indices.shape}"
        )


def expected(case: GatherCase, out_of_bounds: str = "directml") -> np.ndarray:
    """The case through ``onnx_gather.core.semantics``, in the DML form the converter gives it, as the ONNX output."""
    data, indices = case.data, case.indices
    carried = data.view(np.uint8) if data.dtype == np.bool_ else data  # a gather moves BOOL as bytes
    k = indices.shape[-1] if case.op == "GatherND" else 0
    form = dml_form(case.op, data.ndim, indices.ndim, case.axis, case.batch, k)
    padded_data = carried.reshape((1,) * form.input_ones + data.shape)
    padded_indices = indices.reshape((1,) * form.indices_ones + indices.shape)
    gather = {
        "Gather": semantics.dml_gather,
        "GatherElements": semantics.dml_gather_elements,
        "GatherND": semantics.dml_gather_nd,
    }[case.op]
    result = gather(padded_data, padded_indices, **form.attributes, out_of_bounds=out_of_bounds)
    return result.reshape(result.shape[form.output_ones :]).view(data.dtype)


def _index_values(rng: np.random.Generator, count: int, size: int, dtype: type, beyond: bool) -> np.ndarray:
    """Out-of-bounds values of every kind: just outside, far, negative, at the int32 limits, and beyond them."""
    kinds = [
        lambda: size + rng.integers(0, 4),
        lambda: -size - 1 - rng.integers(0, 4),
        lambda: rng.integers(size, 10**6),
        lambda: -rng.integers(size + 1, 10**6),
        lambda: rng.choice([INT32_MAX, INT32_MIN, INT32_MAX - 1, INT32_MIN + 1]),
    ]
    if beyond:
        kinds += [
            lambda: 2**32 + rng.integers(-size, 2 * size + 1),
            lambda: -(2**32) + rng.integers(-2 * size, size + 1),
            lambda: rng.choice([2**40 + 3, -(2**40), 2**63 - 1, -(2**63), 2**31 + rng.integers(0, 8)]),
        ]
    return np.array([kinds[rng.integers(len(kinds))]() for _ in range(count)], dtype=np.int64).astype(dtype)


def _shape(rng: np.random.Generator, rank: int, high: int) -> tuple[int, ...]:
    while True:
        shape = tuple(int(s) for s in rng.integers(1, high + 1, rank))
        if int(np.prod(shape)) <= MAX_CASE_ELEMENTS:
            return shape


def _data(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    if np.dtype(dtype) == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    # Random bit patterns: NaN payloads, infinities, -0.0 and subnormals included.
    return rng.integers(0, 256, count * dtype.itemsize, dtype=np.uint8).view(dtype).reshape(shape)


def random_gather_case(
    rng: np.random.Generator, out_of_bounds: bool, beyond_int32: bool = False, data_types: Sequence[str] = ALL
) -> GatherCase:
    """A random case: ranks 1 to 6, every axis (negative half the time), scalar indices too, data of ``data_types``."""
    op = "Gather" if rng.random() < 0.6 else "GatherElements"
    dtype = HARNESS_DTYPES[data_types[rng.integers(len(data_types))]]
    index_type = np.int64 if beyond_int32 else STANDARD_INDEX_DTYPES[rng.integers(2)]
    r = int(rng.integers(1, 7))
    data_shape = _shape(rng, r, 5)
    axis = int(rng.integers(r))
    if op == "Gather":
        q = int(rng.integers(0, min(9 - r, 6) + 1))  # index_dimensions: 0 (a scalar) to what N = 8 allows
        index_shape = _shape(rng, q, 3)
    else:
        index_shape = (*data_shape[:axis], int(rng.integers(1, 6)), *data_shape[axis + 1 :])
        if int(np.prod(index_shape)) > MAX_CASE_ELEMENTS:
            index_shape = data_shape
    size = data_shape[axis]
    indices = rng.integers(-size, size, index_shape).astype(index_type)
    if out_of_bounds:
        flat = indices.reshape(-1)
        count = int(rng.integers(1, flat.size + 1)) if rng.random() < 0.5 else 1
        where = rng.choice(flat.size, count, replace=False)
        flat[where] = _index_values(rng, count, size, index_type, beyond_int32)
        if beyond_int32 and not ((flat < INT32_MIN) | (flat > INT32_MAX)).any():
            flat[where[0]] = 2**32 + 1
    written_axis = axis - r if rng.random() < 0.5 else axis
    return GatherCase(op, _data(rng, data_shape, dtype), indices, written_axis)


def random_nd_case(
    rng: np.random.Generator, out_of_bounds: bool, beyond_int32: bool = False, data_types: Sequence[str] = ALL
) -> GatherCase:
    """A random GatherND: data ranks 1 to 6, batch_dims 0 to 2, every tuple length, data of ``data_types``, INT64
    indices (all GatherND takes), N up to 8."""
    dtype = HARNESS_DTYPES[data_types[rng.integers(len(data_types))]]
    while True:
        r = int(rng.integers(1, 7))
        batch = int(rng.integers(0, min(r, 3)))
        k = int(rng.integers(1, r - batch + 1))
        data_shape = _shape(rng, r, 4)
        index_shape = (*data_shape[:batch], *_shape(rng, int(rng.integers(0, 3)), 3), k)
        try:
            if dml_form("GatherND", r, len(index_shape), 0, batch, k).output_rank > 0:
                break  # (a scalar output: ONNX Runtime's DirectML provider fails on it, docs/semantics.md section 6)
        except FormError:
            continue  # more than DirectML's 8 dimensions
    sizes = np.array(data_shape[batch : batch + k])
    indices = (rng.random(index_shape) * 2 * sizes - sizes).astype(np.int64)  # each coordinate in [-size, size)
    if out_of_bounds:
        flat, dims = indices.reshape(-1, k), np.broadcast_to(sizes, indices.reshape(-1, k).shape)
        count = int(rng.integers(1, flat.size + 1)) if rng.random() < 0.5 else 1
        for where in rng.choice(flat.size, count, replace=False):
            row, j = divmod(int(where), k)
            flat[row, j] = _index_values(rng, 1, int(dims[row, j]), np.int64, beyond_int32)[0]
        if beyond_int32 and not ((flat < INT32_MIN) | (flat > INT32_MAX)).any():
            flat[0, 0] = 2**32 + 1
    return GatherCase("GatherND", _data(rng, data_shape, dtype), indices, 0, batch)


def random_gather_cases(
    seed: int,
    count: int,
    out_of_bounds: float = 0.0,
    beyond_int32: float = 0.0,
    nd: bool = False,
    data_types: Sequence[str] = ALL,
) -> list[GatherCase]:
    """``count`` cases (GatherND ones if ``nd``, else Gather and GatherElements) with data of ``data_types`` (all 12
    by default); the fractions ``out_of_bounds`` and ``beyond_int32`` (int64 values outside int32) of them hold
    out-of-bounds indices."""
    rng = np.random.default_rng(seed)
    make = random_nd_case if nd else random_gather_case
    cases = []
    for k in range(count):
        beyond = k < round(count * beyond_int32)
        outside = beyond or k < round(count * (out_of_bounds + beyond_int32))
        cases.append(make(rng, outside, beyond, data_types))
    order = rng.permutation(count)
    return [cases[k] for k in order]


def case_model(cases: Sequence[GatherCase]) -> onnx.ModelProto:
    """One model holding every case: inputs ``data_k``, ``indices_k``, output ``output_k``."""
    nodes, inputs, outputs = [], [], []
    for k, case in enumerate(cases):
        data_type = helper.np_dtype_to_tensor_dtype(case.data.dtype)
        attributes = (
            ({"batch_dims": case.batch} if case.batch else {}) if case.op == "GatherND" else {"axis": case.axis}
        )
        nodes.append(
            helper.make_node(case.op, [f"data_{k}", f"indices_{k}"], [f"output_{k}"], f"case_{k}", **attributes)
        )
        inputs += [
            helper.make_tensor_value_info(f"data_{k}", data_type, case.data.shape),
            helper.make_tensor_value_info(
                f"indices_{k}", helper.np_dtype_to_tensor_dtype(case.indices.dtype), case.indices.shape
            ),
        ]
        outputs.append(helper.make_tensor_value_info(f"output_{k}", data_type, None))
    graph = helper.make_graph(nodes, "conformance", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _feeds(cases: Sequence[GatherCase]) -> dict[str, np.ndarray]:
    feeds = {}
    for k, case in enumerate(cases):
        feeds[f"data_{k}"], feeds[f"indices_{k}"] = case.data, case.indices
    return feeds


def run_directml(runner: Runner, cases: Sequence[GatherCase]) -> list[np.ndarray]:
    """The cases on real DirectML, every node placed there (CPU fallback off), ``CASES_PER_MODEL`` to a session."""
    results = []
    for start in range(0, len(cases), CASES_PER_MODEL):
        batch = cases[start : start + CASES_PER_MODEL]
        loaded = runner.load(case_model(batch))
        try:
            outputs = runner.run(loaded, _feeds(batch))
        finally:
            runner.free(loaded)
        results += [outputs[f"output_{k}"] for k in range(len(batch))]
    return results


def run_custom_ops(cases: Sequence[GatherCase], out_of_bounds: str = "directml") -> list[np.ndarray]:
    """The cases through ``to_dml`` and the custom ops in ONNX Runtime."""
    results = []
    for start in range(0, len(cases), CASES_PER_MODEL):
        batch = cases[start : start + CASES_PER_MODEL]
        session = InferenceSession(to_dml(case_model(batch), out_of_bounds=out_of_bounds).SerializeToString())
        results += session.run([f"output_{k}" for k in range(len(batch))], _feeds(batch))
    return results


def run_lowered(cases: Sequence[GatherCase], out_of_bounds: str = "directml") -> list[np.ndarray]:
    """The cases through ``to_dml`` and ``to_onnx``: standard ONNX in ONNX Runtime's CPU provider."""
    results = []
    for start in range(0, len(cases), CASES_PER_MODEL):
        batch = cases[start : start + CASES_PER_MODEL]
        lowered = to_onnx(to_dml(case_model(batch), out_of_bounds=out_of_bounds))
        session = onnxruntime.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"])
        results += session.run([f"output_{k}" for k in range(len(batch))], _feeds(batch))
    return results


def identical(a: np.ndarray, b: np.ndarray, canonical_nans: bool = False) -> bool:
    """Same type, shape and bytes; with ``canonical_nans``, a NaN meets any NaN (FLOAT16 carried by the custom ops)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if canonical_nans and a.dtype.kind == "f":
        nans = np.isnan(a)
        if not np.array_equal(nans, np.isnan(b)):
            return False
        a, b = a[~nans], b[~nans]
    return np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


@dataclass
class CaseOutcome:
    """One case: what DirectML, the semantics, the custom ops and the lowered graph gave."""

    case: GatherCase
    directml: np.ndarray
    semantics: np.ndarray
    custom_ops: np.ndarray
    lowered: np.ndarray

    @property
    def matches(self) -> bool:
        """DirectML equals the semantics bit for bit."""
        return identical(self.directml, self.semantics)

    @property
    def ops_match(self) -> bool:
        """The custom ops equal the semantics (but for FLOAT16 NaN payloads: the carrying Cast makes them canonical)."""
        return identical(self.custom_ops, self.semantics, canonical_nans=self.case.data.dtype == np.float16)

    @property
    def lowered_matches(self) -> bool:
        """The lowered graph equals the semantics bit for bit (it moves FLOAT16 untouched)."""
        return identical(self.lowered, self.semantics)

    @property
    def mismatching_elements(self) -> int:
        if self.directml.shape != self.semantics.shape or self.directml.dtype != self.semantics.dtype:
            return self.semantics.size
        a = np.ascontiguousarray(self.directml).view(np.uint8).reshape(self.directml.size, -1)
        b = np.ascontiguousarray(self.semantics).view(np.uint8).reshape(self.semantics.size, -1)
        return int((a != b).any(axis=1).sum())


@dataclass
class Run:
    """A harness run: every case's outcome and the seconds DirectML took (sessions made and run)."""

    outcomes: list[CaseOutcome] = field(default_factory=list)
    directml_seconds: float = 0.0


def run_cases(runner: Runner, cases: Sequence[GatherCase], out_of_bounds: str = "directml") -> Run:
    """Every case on real DirectML, through the semantics, and through the custom ops."""
    start = time.perf_counter()
    directml = run_directml(runner, cases)
    seconds = time.perf_counter() - start
    ops, lowered = run_custom_ops(cases, out_of_bounds), run_lowered(cases, out_of_bounds)
    outcomes = [
        CaseOutcome(case, d, expected(case, out_of_bounds), o, low)
        for case, d, o, low in zip(cases, directml, ops, lowered, strict=True)
    ]
    return Run(outcomes, seconds)


def results_table(run: Run) -> str:
    """Per data type: cases in range, out of bounds, and with int64 values beyond int32, and how many match."""
    header = ["data type", "in range", "match", "out of bounds", "match", "elements differing", "beyond int32", "match"]
    rows = []
    for name, dtype in HARNESS_DTYPES.items():
        mine = [o for o in run.outcomes if o.case.data.dtype == np.dtype(dtype)]
        inside = [o for o in mine if not o.case.out_of_bounds]
        outside = [o for o in mine if o.case.out_of_bounds and not o.case.beyond_int32]
        beyond = [o for o in mine if o.case.beyond_int32]
        rows.append(
            [
                name,
                len(inside),
                sum(o.matches for o in inside),
                len(outside),
                sum(o.matches for o in outside),
                sum(o.mismatching_elements for o in outside),
                len(beyond),
                sum(o.matches for o in beyond),
            ]
        )
    rows.append(["all", *(sum(row[c] for row in rows) for c in range(1, len(header)))])
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = [
        "  ".join(
            str(cell).rjust(w) if i else str(cell).ljust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in (header, *rows)
    ]
    return "\n".join(lines)
