"""``onnx-gather demo``: the bundled sample model, converted to DML form, run with the custom ops and natively."""

from __future__ import annotations

from importlib import resources
from typing import TextIO

import numpy as np
import onnx
import onnxruntime

from onnx_gather.convert import convert
from onnx_gather.lower import to_onnx
from onnx_gather.ops import InferenceSession


def sample_model_path() -> str:
    """Where the bundled sample model (models/sample.onnx in the source tree) is installed."""
    return str(resources.files("onnx_gather.models") / "sample.onnx")


def _describe(array: np.ndarray) -> str:
    return f"{array.dtype.name} {{{','.join(str(s) for s in array.shape)}}}"


def run(out: TextIO) -> int:
    """Convert the sample model, run it three ways, print where the outputs agree; 0 if they all do."""
    path = sample_model_path()
    model = onnx.load(path)
    print(f"Sample model: {model.doc_string}", file=out)
    converted, report = convert(model)
    print(f"Converted {len(report.changed)} of {len(report.changed) + len(report.left)} gathers to DML form:", file=out)
    for change in report.changed:
        note = f"; {change.note}" if change.note else ""
        print(f"  {change.node:<10} {change.op_type:<15} -> Dml{change.op_type} {change.reason}{note}", file=out)
    for left in report.left:
        print(f"  {left.node:<10} {left.op_type:<15} left as it was: {left.reason}", file=out)

    token_ids = np.random.default_rng(0).integers(0, 32, (2, 6))
    feeds = {"token_ids": token_ids}
    print(f"Input token_ids {_describe(token_ids)}: {token_ids.tolist()}", file=out)
    native = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    custom = InferenceSession(converted).run(None, feeds)
    lowered = onnxruntime.InferenceSession(
        to_onnx(converted).SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, feeds)

    names = [o.name for o in model.graph.output]
    print(f"\n  {'output':<18} {'type and shape':<22} {'DML custom ops':<16} {'lowered to ONNX':<16}", file=out)
    agreed = 0
    for name, reference, dml, standard in zip(names, native, custom, lowered, strict=True):
        verdicts = [_verdict(reference, result) for result in (dml, standard)]
        agreed += verdicts == ["bit-identical"] * 2
        print(f"  {name:<18} {_describe(reference):<22} {verdicts[0]:<16} {verdicts[1]:<16}", file=out)
    print(
        f"\n{agreed} of {len(names)} outputs are bit-identical to ONNX Runtime {onnxruntime.__version__}'s native "
        "kernels, run with DirectML's semantics (custom ops) and lowered back to standard ONNX.",
        file=out,
    )
    return 0 if agreed == len(names) else 1


def _verdict(reference: np.ndarray, result: np.ndarray) -> str:
    same = reference.dtype == result.dtype and reference.shape == result.shape
    if same and reference.tobytes() == result.tobytes():
        return "bit-identical"
    return "DIFFERENT"
