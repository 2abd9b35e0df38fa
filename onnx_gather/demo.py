"""``onnx-gather demo``: the bundled sample model on every backend that runs here, with parity tables."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import TextIO

import numpy as np

from onnx_gather import model_io, report
from onnx_gather.backends import BACKENDS, Model
from onnx_gather.convert import convert
from onnx_gather.parity import run_parity


def sample_model_path() -> str:
    """Where the bundled sample model (models/sample.onnx in the source tree) is installed."""
    return str(resources.files("onnx_gather.models") / "sample.onnx")


def run(out: TextIO) -> int:
    """Two parity runs of the sample model: in-range ids (all must agree), then one id out of range."""
    path = Path(sample_model_path())
    model = Model(path, model_io.load(path))
    print(f"Sample model: {model.proto.doc_string}", file=out)
    _, conversion = convert(model.proto)
    for change in conversion.changed:
        note = f"; {change.note}" if change.note else ""
        print(f"  {change.node}: {change.op_type} -> Dml{change.op_type}, {change.reason}{note}", file=out)

    token_ids = np.random.default_rng(0).permutation(32)[:12].reshape(2, 6)  # distinct ids: no ties in TopK
    print(f"\n1. Token ids in range: {token_ids.tolist()}\n", file=out)
    in_range = run_parity(model, {"token_ids": token_ids}, BACKENDS)
    print(report.text(in_range), file=out)

    token_ids = token_ids.copy()
    token_ids[0, 1], token_ids[1, 4] = 40, -33  # the vocabulary has 32 entries
    print(f"\n2. Two token ids out of range (40 and -33 with 32 rows): {token_ids.tolist()}\n", file=out)
    out_of_range = run_parity(model, {"token_ids": token_ids}, BACKENDS)
    print(report.text(out_of_range), file=out)
    print(
        "\nIn range, every backend that ran agrees with DirectML's semantics"
        + (" bit for bit." if in_range.report["passed"] else ": NOT SO, see above.")
        + " Out of range, DirectML promises only that nothing fails; the custom ops clamp (as WebNN specifies),"
        " ONNX Runtime's CPU kernels refuse the index and OpenVINO reads zeros.",
        file=out,
    )
    return 0 if in_range.report["passed"] else 1
