"""Conformance of DirectML's scatters through both doors: random ONNX ``ScatterElements`` and ``ScatterND`` (opset
16, the provider's last kernel) run through ONNX Runtime's DirectML provider, and the same cases as DML_SCATTER and
DML_SCATTER_ND descs through DirectML called directly, each held bit for bit against ``onnx_gather.core.scatter``.

Index values are in range, negative, just past, far past and beyond 2^32; several updates of one element carry one
value (which write DirectML keeps among different ones is a race, docs/semantics.md section 10). On the direct door
the output sits in a buffer of its own, beside the other tensors in one buffer, or in place over the input; every
byte of that buffer outside the output's total must keep what it held.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from onnx_gather.core.contract import DIRECTML_DTYPES, NUMPY_NAMES
from onnx_gather.core.descs import Case, TensorDesc, from_buffer, to_buffer
from onnx_gather.core.scatter import dml_scatter_elements, dml_scatter_nd, scatter_elements_offsets, scatter_nd_offsets
from onnx_gather.core.semantics import count_out_of_bounds
from onnx_gather.directml.direct import DirectRunner
from onnx_gather.directml.worker import Runner

OPSET = 16  # ScatterElements-18 and ScatterND-18 have no DirectML kernel: the provider puts them on the CPU
SCATTERS_PER_MODEL = 100


@dataclass(frozen=True)
class ScatterCase:
    """One standard scatter: ``op`` ScatterElements (with ``axis``) or ScatterND."""

    op: str
    data: np.ndarray
    indices: np.ndarray
    updates: np.ndarray
    axis: int = 0

    def dml(self) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], dict[str, int]]:
        """The three arrays with leading 1s to one dimension count N, and the DML operator's attributes."""
        if self.op == "ScatterElements":
            return (self.data, self.indices, self.updates), {"axis": self.axis}
        n = max(self.data.ndim, self.indices.ndim, self.updates.ndim)
        arrays = tuple(a.reshape((1,) * (n - a.ndim) + a.shape) for a in (self.data, self.indices, self.updates))
        return arrays, {"input_dimension_count": self.data.ndim, "indices_dimension_count": self.indices.ndim}

    def expected(self) -> np.ndarray:
        """The output ``core.scatter`` states, of the data's shape."""
        (data, indices, updates), attributes = self.dml()
        scatter = dml_scatter_elements if self.op == "ScatterElements" else dml_scatter_nd
        return scatter(data, indices, updates, *attributes.values()).reshape(self.data.shape)

    def offsets(self) -> np.ndarray:
        """Each update's output offset, as DirectML computes it (past the output: dropped)."""
        if self.op == "ScatterElements":
            return scatter_elements_offsets(self.data.shape, self.indices, self.axis)
        return scatter_nd_offsets(self.data.shape, self.indices.reshape(-1, self.indices.shape[-1]))

    @property
    def out_of_bounds(self) -> bool:
        """Whether an index value (a tuple coordinate) lies outside ``[-size, size)`` of its dimension."""
        if self.op == "ScatterElements":
            return count_out_of_bounds(self.indices, self.data.shape[self.axis]) > 0
        tuples = self.indices.reshape(-1, self.indices.shape[-1])
        return any(count_out_of_bounds(tuples[:, j], self.data.shape[j]) for j in range(tuples.shape[1]))


def _values(rng: np.random.Generator, count: int, size: int, dtype: np.dtype) -> np.ndarray:
    """Index values: in range, negative (signed types), just past, far past, at the int32 limits, beyond 2^32."""
    kinds = [lambda: rng.integers(0, size), lambda: rng.integers(0, size)]
    if dtype.kind == "i":
        kinds += [lambda: -rng.integers(1, size + 1), lambda: -size - 1 - rng.integers(0, 4)]
    kinds += [lambda: size + rng.integers(0, 4), lambda: rng.integers(size, 10**6), lambda: 2**31 - 1]
    if dtype.itemsize == 8:
        kinds += [lambda: 2**32 + rng.integers(-size, size), lambda: -(2**32) + rng.integers(0, size)]
    rate = float(rng.choice([0.0, 0.2, 1.0]))
    pick = [
        kinds[rng.integers(2)]() if rng.random() >= rate else kinds[rng.integers(len(kinds))]() for _ in range(count)
    ]
    return np.array(pick, dtype=np.int64).astype(dtype)


def _one_value_per_element(case: ScatterCase) -> ScatterCase:
    """The case with every group of updates that write one element given the group's last value."""
    offsets, flat = case.offsets(), case.updates.copy().reshape(-1)
    last = {int(o): k for k, o in enumerate(offsets)}
    flat[:] = flat[[last[int(o)] for o in offsets]]
    return ScatterCase(case.op, case.data, case.indices, flat.reshape(case.updates.shape), case.axis)


def random_scatter_case(rng: np.random.Generator) -> ScatterCase:
    """A random ScatterElements (int32 or int64 indices) or ScatterND (int64), ranks 1 to 5, every data type."""
    dtype = np.dtype(DIRECTML_DTYPES[str(rng.choice(list(DIRECTML_DTYPES)))])
    rank = int(rng.integers(1, 6))
    shape = tuple(int(s) for s in rng.integers(1, 6, rank))
    data = rng.integers(0, 256, int(np.prod(shape)) * dtype.itemsize, dtype=np.uint8).view(dtype).reshape(shape)
    if rng.random() < 0.5:
        axis = int(rng.integers(rank))
        index_shape = (*shape[:axis], int(rng.integers(1, shape[axis] + 1)), *shape[axis + 1 :])
        index_type = np.dtype(rng.choice([np.int32, np.int64]))
        indices = _values(rng, int(np.prod(index_shape)), shape[axis], index_type).reshape(index_shape)
        op = "ScatterElements"
    else:
        k = int(rng.integers(1, rank + 1))
        lead = tuple(int(s) for s in rng.integers(1, 4, int(rng.integers(0, 3))))
        columns = [_values(rng, int(np.prod(lead, dtype=np.int64)), shape[j], np.dtype(np.int64)) for j in range(k)]
        indices = np.stack(columns, axis=-1).reshape((*lead, k))
        index_shape, axis, op = (*lead, *shape[k:]), 0, "ScatterND"
    updates = rng.integers(0, 256, int(np.prod(index_shape)) * dtype.itemsize, dtype=np.uint8).view(dtype)
    return _one_value_per_element(ScatterCase(op, data, indices, updates.reshape(index_shape), axis))


def random_scatter_cases(seed: int, count: int) -> list[ScatterCase]:
    rng = np.random.default_rng(seed)
    return [random_scatter_case(rng) for _ in range(count)]


def scatter_model(cases: Sequence[ScatterCase]) -> onnx.ModelProto:
    """One model holding a node per case, its three inputs graph inputs, at opset ``OPSET``."""
    nodes, inputs, outputs = [], [], []
    for k, case in enumerate(cases):
        names = [f"data_{k}", f"indices_{k}", f"updates_{k}"]
        attributes = {"axis": case.axis} if case.op == "ScatterElements" else {}
        nodes.append(helper.make_node(case.op, names, [f"output_{k}"], **attributes))
        for name, array in zip(names, (case.data, case.indices, case.updates), strict=True):
            inputs.append(
                helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape)
            )
        outputs.append(
            helper.make_tensor_value_info(
                f"output_{k}", helper.np_dtype_to_tensor_dtype(case.data.dtype), case.data.shape
            )
        )
    graph = helper.make_graph(nodes, "scatters", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)


def run_provider(runner: Runner, cases: Sequence[ScatterCase]) -> list[np.ndarray]:
    """The cases through ONNX Runtime's DirectML provider, CPU fallback off, ``SCATTERS_PER_MODEL`` to a session."""
    results: list[np.ndarray] = []
    for start in range(0, len(cases), SCATTERS_PER_MODEL):
        batch = cases[start : start + SCATTERS_PER_MODEL]
        loaded = runner.load(scatter_model(batch))
        try:
            feeds = {}
            for k, case in enumerate(batch):
                feeds |= {f"data_{k}": case.data, f"indices_{k}": case.indices, f"updates_{k}": case.updates}
            outputs = runner.run(loaded, feeds)
        finally:
            runner.free(loaded)
        results += [outputs[f"output_{k}"] for k in range(len(batch))]
    return results


PLACES = ("own buffer", "shared buffer", "in place")


def direct_case(case: ScatterCase, place: str, fill: int) -> Case:
    """The case as a DML_SCATTER(_ND) desc of the tensors as the provider lays them out (``TensorDesc.provider``):
    the output in a buffer of its own, after the other three in one buffer with gaps, or in place over the input."""
    arrays, attributes = case.dml()
    arrays = (*arrays, arrays[0])
    descs = [TensorDesc.provider(NUMPY_NAMES[a.dtype], a.shape) for a in arrays]
    data = [to_buffer(d, a) for d, a in zip(descs, arrays, strict=True)]
    memory, offsets = 0, ()
    if place != "own buffer":
        starts = np.cumsum([0, *(-(-d.total_bytes // 64) * 64 + 64 for d in descs)])
        offsets = tuple(int(s) for s in starts[:4])
        if place == "in place":
            offsets = (*offsets[:3], offsets[0])
        memory = int(starts[4])
    operator = "SCATTER" if case.op == "ScatterElements" else "SCATTER_ND"
    return Case(
        operator, attributes, descs[0], descs[1], descs[3], data[0], data[1], fill, descs[2], data[2], memory, offsets
    )


def expected_buffer(case: Case, output: np.ndarray) -> tuple[bytes, slice]:
    """The buffer read back with ``output`` in the output's place, and where the output's total lies (its padding
    bytes there are not predicted: an update may land in them)."""
    if not case.memory:
        before = bytearray([case.fill] * case.output.total_bytes)
        at = 0
    else:
        before = bytearray([case.fill] * case.memory)
        for at, data in zip(case.offsets, case.inputs, strict=False):
            before[at : at + len(data)] = data
        at = case.offsets[3]
    element = output.dtype.itemsize * output.size
    before[at : at + element] = np.ascontiguousarray(output).tobytes()
    return bytes(before), slice(at + element, at + case.output.total_bytes)


def run_direct(runner: DirectRunner, cases: Sequence[ScatterCase], seed: int) -> list[tuple[np.ndarray | None, bool]]:
    """The cases through DirectML called directly, each in a random place: DirectML's output tensor (None if refused)
    and whether every byte of the buffer outside the output's total kept what it held."""
    rng = np.random.default_rng(seed)
    descs = [direct_case(c, PLACES[int(rng.integers(3))], int(rng.integers(256))) for c in cases]
    results = []
    for case, desc, outcome in zip(cases, descs, runner.run(descs), strict=True):
        if outcome.output is None:
            results.append((None, False))
            continue
        got, skip = expected_buffer(desc, case.expected())
        at = desc.offsets[3] if desc.memory else 0
        tensor = from_buffer(desc.output, outcome.output[at : at + desc.output.total_bytes])
        kept = outcome.output[: skip.start] == got[: skip.start] and outcome.output[skip.stop :] == got[skip.stop :]
        results.append((tensor.reshape(case.data.shape), kept))
    return results
