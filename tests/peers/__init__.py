"""The peers' gather and scatter tests as data (``cases.json`` beside this file), and ONNX models made of them.

The cases are transcribed from ONNX Runtime's kernel tests (``onnxruntime/test/providers/cpu/tensor/
gather_op_test.cc``, ``gather_elements_op_test.cc``, ``gather_nd_op_test.cc``, ``scatter_op_test.cc``,
``scatter_nd_op_test.cc``) and WebNN's conformance tests in the web-platform-tests
(``webnn/conformance_tests/gather.https.any.js``, ``gatherElements...``, ``gatherND...``, ``scatterElements...``,
``scatterND...``); the file's ``sources`` say which versions and what was left out. A case's name is ``<source
file>:<test name>`` with, in brackets, the variant a test helper makes (indices as an input or an initializer, the
opset of GatherND's RunTest, the op and opset of a scatter test's two testers, ``test1``... for a TEST's numbered
testers).

A case: the op, the opset (ORT's OpTester default, 7, where a test names none; 13 for WebNN, which has no opsets),
the attributes as the test sets them (a scatter's ``reduction`` too: DirectML's provider leaves those to the CPU),
the data, indices and, for a scatter, updates (dtype, shape, values, and whether a graph input or an initializer, as
the test declares them; ``dims`` names a WebNN dynamic dimension), the peer's expected output or
expected error, and ``directml``: the verdict real DirectML gave, measured with ``tools/peer_verdicts.py``:
``{"ran": true}`` (the output is the peer's expected output, bit for bit), ``{"ran": true, "output": [...]}`` (it is
not: DirectML's own output) or ``{"failed": "creation" | "run" | "crash", "message": ...}`` (a part of the error;
``crash``: the process died, what Wine said ended it); ``"on"``
names the provider that ran the case, or failed it as it ran, where it was not DirectML's (which did not take it).
``difference`` gives, where the peer's expectation and DirectML's verdict differ, the kind
(``error expected``, ``output expected``, ``values``, ``tolerance``) and the reason.

Values: a list, ``{"ref": name, "count": n}`` (the first n of a shared tensor of ``tensors``), ``{"range": [start,
step]}`` (ORT's ValueRange: start, start + step, ... accumulated in the tensor's type) or ``{"fill": v}``.
``"literal": "float32"``: the values are C float literals (``0.1f``) converted to the tensor's type, as ORT's tests
write DOUBLE and FLOAT16 values. Index types ONNX does not take (WebNN's uint32; int32 for GatherND and ScatterND,
which take int64 only) are given to ONNX as int64, with the same values.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnx_gather.conformance import provider_door

CASES_FILE = Path(__file__).with_name("cases.json")
IR_VERSION = 8


def dtype_of(name: str) -> np.dtype:
    """The numpy type of a peer's type name (numpy's names, and "string")."""
    return np.dtype(object) if name == "string" else np.dtype(name)


@dataclass(frozen=True)
class Tensor:
    """A case's data, indices or updates: its values as the peer gives them and how the graph declares it."""

    dtype: str  # the peer's type name (numpy's, and "string")
    array: np.ndarray
    initializer: bool
    dims: tuple  # the declared shape: sizes, or names of dynamic dimensions


@dataclass(frozen=True)
class Case:
    name: str
    op: str
    opset: int
    attributes: dict
    data: Tensor
    indices: Tensor
    updates: Tensor | None  # a scatter's; None for a gather
    expected: np.ndarray | None  # None where the peer expects an error
    error: str | None  # the error the peer expects (a part of its message; "" where it names none)
    directml: dict
    difference: dict | None

    @property
    def source(self) -> str:
        return self.name.split(":", 1)[0]

    @property
    def ran(self) -> bool:
        return bool(self.directml.get("ran"))

    @property
    def directml_output(self) -> np.ndarray:
        """What DirectML computed (a case it ran): the peer's expected output unless another is recorded."""
        if "output" not in self.directml:
            assert self.expected is not None
            return self.expected
        return _values(self.directml["output"], self.data.array.dtype, self.directml["shape"])

    @property
    def onnx_index_dtype(self) -> np.dtype:
        dtype = self.indices.array.dtype
        if self.op in ("GatherND", "ScatterND") or dtype not in (np.int32, np.int64):
            return np.dtype(np.int64)
        return dtype


def verdict_kind(verdict: dict) -> str:
    """A verdict in words: "ran", "failed at <stage>" or "not run", with "on <provider>" where not DirectML's."""
    kind = "ran" if "ran" in verdict else f"failed at {verdict['failed']}" if "failed" in verdict else "not run"
    return kind + (f" on {verdict['on']}" if "on" in verdict else "")


def identical(a: np.ndarray, b: np.ndarray) -> bool:
    """Same type, shape and bytes; STRING tensors the same strings."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype == object or b.dtype == object:
        return a.dtype == b.dtype and a.shape == b.shape and a.tolist() == b.tolist()
    return provider_door.identical(a, b)


def _values(spec, dtype: np.dtype, shape: Sequence[int], tensors: dict | None = None, literal: str = "") -> np.ndarray:
    count = int(np.prod(shape, dtype=np.int64))
    if isinstance(spec, dict) and "ref" in spec:
        spec = tensors[spec["ref"]][: spec.get("count", count)]
    if isinstance(spec, dict) and "fill" in spec:
        return np.full(shape, spec["fill"], dtype)
    if isinstance(spec, dict):  # ValueRange: each value the previous plus step, rounded to the tensor's type
        start, step = spec["range"]
        return np.add.accumulate(np.array([start] + [step] * (count - 1), dtype), dtype=dtype).reshape(shape)
    if literal:
        return np.array(spec, np.dtype(literal)).astype(dtype).reshape(shape)
    return np.array(spec, dtype).reshape(shape)


def _tensor(spec: dict, tensors: dict) -> Tensor:
    dtype = dtype_of(spec["dtype"])
    array = _values(spec["values"], dtype, spec["shape"], tensors, spec.get("literal", ""))
    return Tensor(spec["dtype"], array, spec.get("as") == "initializer", tuple(spec.get("dims", spec["shape"])))


@cache
def document() -> dict:
    return json.loads(CASES_FILE.read_text())


def save(doc: dict) -> None:
    """Write ``doc`` as cases.json: one line per source, shared tensor and case."""
    line = lambda value: json.dumps(value, separators=(", ", ": "))  # noqa: E731
    parts = []
    for key in ("sources", "tensors", "cases"):
        items = doc[key].items() if isinstance(doc[key], dict) else [(None, case) for case in doc[key]]
        rows = [f"  {line(name)}: {line(value)}" if name is not None else f"  {line(value)}" for name, value in items]
        brackets = "{}" if isinstance(doc[key], dict) else "[]"
        parts.append(f' "{key}": {brackets[0]}\n' + ",\n".join(rows) + f"\n {brackets[1]}")
    CASES_FILE.write_text("{\n" + f' "about": {line(doc["about"])},\n' + ",\n".join(parts) + "\n}\n")
    document.cache_clear()
    load.cache_clear()


@cache
def load() -> tuple[Case, ...]:
    doc = document()
    cases = []
    for spec in doc["cases"]:
        data, indices = _tensor(spec["data"], doc["tensors"]), _tensor(spec["indices"], doc["tensors"])
        updates = _tensor(spec["updates"], doc["tensors"]) if "updates" in spec else None
        expected = spec["expected"]
        array = None
        if "error" not in expected:
            array = _values(
                expected["values"], data.array.dtype, expected["shape"], doc["tensors"], expected.get("literal", "")
            )
        cases.append(
            Case(
                spec["name"],
                spec["op"],
                spec["opset"],
                spec.get("attributes", {}),
                data,
                indices,
                updates,
                array,
                expected.get("error"),
                spec.get("directml", {}),
                spec.get("difference"),
            )
        )
    return tuple(cases)


def _value_info(name: str, dtype: np.dtype, dims: Sequence, case: int) -> onnx.ValueInfoProto:
    # Dynamic dimensions are named per case: cases packed into one model do not share them.
    shape = [d if isinstance(d, int) else f"case{case}_{d}" for d in dims]
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(dtype), shape)


def _inputs(case: Case) -> list[tuple[str, Tensor, np.dtype]]:
    """The node's inputs: name, tensor and the type ONNX is given it in."""
    inputs = [("data", case.data, case.data.array.dtype), ("indices", case.indices, case.onnx_index_dtype)]
    if case.updates is not None:
        inputs.append(("updates", case.updates, case.updates.array.dtype))
    return inputs


def model(cases: Sequence[Case]) -> onnx.ModelProto:
    """One model holding every case (all of one opset): inputs or initializers ``data_k``, ``indices_k`` and (a
    scatter) ``updates_k`` as the case declares them, node ``case_k``, output ``output_k`` (its type; its shape left
    to inference)."""
    (opset,) = {case.opset for case in cases}
    nodes, inputs, initializers, outputs = [], [], [], []
    for k, case in enumerate(cases):
        tensors = _inputs(case)
        nodes.append(
            helper.make_node(
                case.op, [f"{name}_{k}" for name, _, _ in tensors], [f"output_{k}"], f"case_{k}", **case.attributes
            )
        )
        for name, tensor, dtype in tensors:
            if tensor.initializer:
                initializers.append(numpy_helper.from_array(tensor.array.astype(dtype), f"{name}_{k}"))
            else:
                inputs.append(_value_info(f"{name}_{k}", dtype, tensor.dims, k))
        outputs.append(_value_info(f"output_{k}", case.data.array.dtype, [], k))
        outputs[-1].type.tensor_type.ClearField("shape")
    graph = helper.make_graph(nodes, "peers", inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)


def feeds(cases: Sequence[Case]) -> dict[str, np.ndarray]:
    """The graph inputs of ``model(cases)``."""
    values = {}
    for k, case in enumerate(cases):
        for name, tensor, dtype in _inputs(case):
            if not tensor.initializer:
                values[f"{name}_{k}"] = tensor.array.astype(dtype)
    return values


def within_tolerance(case: Case, actual: np.ndarray) -> bool:
    """Whether ``actual`` meets the peer's expected output within the peer's own tolerance (see ``sources``)."""
    expected = case.expected
    if expected is None or actual.dtype != expected.dtype or actual.shape != expected.shape:
        return False
    bounds = document()["sources"][case.source]["tolerance"].get(case.data.dtype)
    if bounds is None:
        return identical(actual, expected)
    wide = expected.astype(np.float64)
    return bool((np.abs(wide - actual.astype(np.float64)) <= bounds[0] + bounds[1] * np.abs(wide)).all())


def difference(case: Case) -> str | None:
    """How the peer's expectation and DirectML's recorded verdict differ: ``error expected`` (DirectML ran), ``output
    expected`` (DirectML failed), ``tolerance`` (DirectML's output meets it only within the peer's tolerance),
    ``values`` (it does not); None where they agree."""
    if case.expected is None:
        return "error expected" if case.ran else None
    if not case.ran:
        return "output expected"
    if "output" not in case.directml:
        return None
    return "tolerance" if within_tolerance(case, case.directml_output) else "values"
