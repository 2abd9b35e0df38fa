"""Conformance against DirectML called directly: random operator descs over the whole domain (DML_GATHER,
DML_GATHER_ELEMENTS, DML_GATHER_ND1; 1 to 8 dimensions; IndexDimensions 0 to N; cropped outputs; leading index sizes;
strides, slack and alignment; the 11 data types and 4 index types; indices in range and out of bounds), run on
DirectML through direct.exe, predicted by ``onnx_gather.core.predict``, and, where the desc is one an ONNX tensor can
carry in the layout whose results equal ONNX Runtime's provider's (``TensorDesc.provider``), computed by the
custom ops too.

A case agrees when DirectML's verdict (refused at creation, or run) is the prediction's, and a run's whole output
buffer (the bytes DirectML wrote and those it left at the fill) is the predicted one, bit for bit.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from onnx import helper

from onnx_gather.conformance.provider_door import CASES_PER_MODEL
from onnx_gather.core import contract, predict
from onnx_gather.core.contract import DOMAIN
from onnx_gather.core.descs import Case, DescOutcome, TensorDesc, from_buffer
from onnx_gather.directml.direct import DirectRunner
from onnx_gather.graphs.emit import IR_VERSION, ONNX_OPSET
from onnx_gather.runtime.ops import InferenceSession

OPERATORS = ("GATHER", "GATHER_ELEMENTS", "GATHER_ND", "GATHER_ND1")
KINDS = ("refused", "in range", "out of bounds", "not predicted")
# The custom op of each DirectML operator (GATHER_ND is GATHER_ND1 without batch dimensions).
_CUSTOM_OPS = {op.directml.removeprefix("DML_"): op.op_type for op in contract.OPS} | {"GATHER_ND": "DmlGatherNd"}


@dataclass
class Result:
    """One case: its kind (``KINDS``), whether DirectML agrees with the prediction, and, where the custom ops could
    run it, whether they agree (None where they could not)."""

    case: Case
    kind: str
    directml: DescOutcome
    predicted: DescOutcome | None  # None: not predicted
    agrees: bool
    custom_ops: bool | None = None
    reason: str = ""  # why not predicted


@dataclass
class Run:
    results: list[Result] = field(default_factory=list)
    seconds: float = 0.0  # on DirectML

    @property
    def disagreements(self) -> list[Result]:
        return [r for r in self.results if not r.agrees or r.custom_ops is False]


def _kind(case: Case, predicted: DescOutcome | None) -> str:
    if predicted is None:
        return "not predicted"
    if predicted.refused is not None:
        return "refused"
    return "out of bounds" if predict.out_of_bounds(case) else "in range"


def _carried(case: Case) -> bool:
    """Whether the custom ops compute the case: every desc the one ONNX Runtime's provider makes of an ONNX tensor
    (``TensorDesc.provider``), and the input buffers' padding zero (a buffer's, before anything wrote there)."""
    descs = (case.input, case.indices, case.output)
    if any(d != TensorDesc.provider(d.dtype, d.sizes) for d in descs):
        return False
    if case.operator == "GATHER" and case.attributes["index_dimensions"] == 0 and case.output.sizes[0] != 1:
        return False  # a first output size before C: the custom op's output has a 1 there
    for desc, data in ((case.input, case.input_bytes), (case.indices, case.indices_bytes)):
        used = int(np.prod(desc.sizes, dtype=np.int64)) * desc.itemsize
        if any(data[used:]):
            return False
    return True


def _custom_ops_model(cases: Sequence[Case]) -> tuple[bytes, dict[str, np.ndarray]]:
    """One model holding a custom-op node per case (FLOAT16 data as FLOAT32, as ``to_dml`` carries it)."""
    nodes, inputs, outputs, feeds = [], [], [], {}
    for k, case in enumerate(cases):
        data = from_buffer(case.input, case.input_bytes)
        mode = contract.DIRECTML_16BIT if data.dtype == np.float16 else "directml"
        data = data.astype(np.float32) if data.dtype == np.float16 else data
        indices = from_buffer(case.indices, case.indices_bytes)
        attributes = dict(case.attributes)
        if case.operator == "GATHER_ND":
            attributes["batch_dimension_count"] = 0
        nodes.append(
            helper.make_node(
                _CUSTOM_OPS[case.operator],
                [f"input_{k}", f"indices_{k}"],
                [f"output_{k}"],
                domain=DOMAIN,
                out_of_bounds=mode,
                **attributes,
            )
        )
        for name, array in ((f"input_{k}", data), (f"indices_{k}", indices)):
            inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(array.dtype), None))
            feeds[name] = array
        outputs.append(helper.make_tensor_value_info(f"output_{k}", helper.np_dtype_to_tensor_dtype(data.dtype), None))
    graph = helper.make_graph(nodes, "direct_conformance", inputs, outputs)
    opsets = [helper.make_opsetid("", ONNX_OPSET), helper.make_opsetid(DOMAIN, contract.DOMAIN_VERSION)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION).SerializeToString(), feeds


def _custom_ops_agree(cases: Sequence[Case], outcomes: Sequence[DescOutcome]) -> list[bool]:
    """Whether the custom ops compute, for each packed case DirectML ran, the tensor DirectML wrote."""
    agree = []
    for start in range(0, len(cases), CASES_PER_MODEL):
        batch, ran = cases[start : start + CASES_PER_MODEL], outcomes[start : start + CASES_PER_MODEL]
        model, feeds = _custom_ops_model(batch)
        results = InferenceSession(model).run(None, feeds)
        for case, outcome, result in zip(batch, ran, results, strict=True):
            expected = from_buffer(case.output, outcome.output)  # type: ignore[arg-type]
            got = np.asarray(result).astype(expected.dtype)
            agree.append(got.shape == expected.shape and got.tobytes() == expected.tobytes())
    return agree


def run_cases(runner: DirectRunner, cases: Sequence[Case]) -> Run:
    """Every case on DirectML, through the prediction and, where they can carry it, through the custom ops."""
    start = time.perf_counter()
    outcomes = runner.run(cases)
    result = Run(seconds=time.perf_counter() - start)
    for case, outcome in zip(cases, outcomes, strict=True):
        try:
            predicted: DescOutcome | None = predict.predict(case)
            reason = ""
        except predict.NotPredicted as error:
            predicted, reason = None, str(error)
        agrees = predicted is None or predicted == outcome
        result.results.append(Result(case, _kind(case, predicted), outcome, predicted, agrees, reason=reason))
    carried = [r for r in result.results if r.directml.refused is None and r.predicted is not None and _carried(r.case)]
    for r, agrees in zip(
        carried, _custom_ops_agree([r.case for r in carried], [r.directml for r in carried]), strict=True
    ):
        r.custom_ops = agrees
    return result


def results_table(run: Run) -> str:
    """Per operator and kind: cases, how many DirectML agrees with, how many the custom ops ran and agree with."""
    counts: Counter = Counter()
    for r in run.results:
        counts[(r.case.operator, r.kind, "cases")] += 1
        counts[(r.case.operator, r.kind, "agree")] += r.agrees
        counts[(r.case.operator, r.kind, "custom ops")] += r.custom_ops is not None
        counts[(r.case.operator, r.kind, "custom ops agree")] += bool(r.custom_ops)
    lines = [f"{'operator':<16} {'kind':<14} {'cases':>6} {'DirectML agrees':>16} {'custom ops':>11} {'agree':>6}"]
    for operator in OPERATORS:
        for kind in KINDS:
            if counts[(operator, kind, "cases")]:
                c = [counts[(operator, kind, what)] for what in ("cases", "agree", "custom ops", "custom ops agree")]
                lines.append(f"{operator:<16} {kind:<14} {c[0]:>6} {c[1]:>16} {c[2]:>11} {c[3]:>6}")
    return "\n".join(lines)
