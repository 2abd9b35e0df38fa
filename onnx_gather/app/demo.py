"""``onnx-gather demo``: the bundled sample model on every backend that runs here, with parity tables."""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

import numpy as np

from onnx_gather.app import report
from onnx_gather.app.hints import parity_hint
from onnx_gather.app.options import InputChoice
from onnx_gather.app.report import Reported
from onnx_gather.graphs.bundled import sample_model_path
from onnx_gather.graphs.convert import convert
from onnx_gather.runtime import backends
from onnx_gather.runtime.backends import Backend
from onnx_gather.runtime.comparison import Tolerance
from onnx_gather.runtime.inputs import Feeds
from onnx_gather.runtime.model import Model
from onnx_gather.runtime.parity import Parity, run_parity


def _side_by_side(parity: Parity, token_ids: np.ndarray, out: TextIO) -> None:
    """The embeddings of the out-of-range ids as the custom ops, real DirectML and its emulation computed them."""
    dml = parity.backends["dml"]
    shown = ["pyop", "dml", "dmlsim"] if dml.outcome is not None else ["pyop", "dmlsim"]
    if dml.outcome is None:
        print(f"\nReal DirectML did not run here ({dml.status}: {dml.reason}); dmlsim emulates it.", file=out)
    print(
        f"\nThe out-of-range ids' embeddings (first 4 of each row), {', '.join(shown)} (dmlsim: DirectML emulated "
        "on the CPU):",
        file=out,
    )
    for position in ((0, 1), (1, 4)):
        print(f"  token_ids{list(position)} = {token_ids[position]}:", file=out)
        for name in shown:
            row = parity.backends[name].outcome.outputs["embeddings"][position][:4]
            print(f"    {name:<6} {np.array2string(row, precision=4, floatmode='fixed')}", file=out)


def _parity(model: Model, token_ids: np.ndarray, built: dict[str, Backend]) -> Reported:
    """The sample model on ``token_ids`` on every backend, against the custom ops (``pyop``)."""
    exact = backends.create(backends.YARDSTICK)  # the float64 yardstick the float outputs are judged by too
    parity = run_parity(
        model, Feeds({"token_ids": token_ids}), list(built.values()), built["pyop"], Tolerance(), exact=exact
    )
    return Reported(parity, parity_hint(parity, model.proto, InputChoice()))


def run_demo(out: TextIO, out_of_bounds: str = "directml") -> int:
    """Two parity runs of the sample model: in-range ids (all must agree), then one id out of range."""
    path = Path(sample_model_path())
    model = Model.read(path)
    print(f"Sample model: {model.proto.doc_string}", file=out)
    _, conversion = convert(model.proto)
    for change in conversion.changed:
        note = f"; {change.note}" if change.note else ""
        print(f"  {change.node}: {change.op_type} -> Dml{change.op_type}, N={change.dimension_count}{note}", file=out)

    built = {
        name: backends.create(name, out_of_bounds=out_of_bounds) for name in backends.default_backends(emulation=True)
    }
    token_ids = np.random.default_rng(0).permutation(32)[:12].reshape(2, 6)  # distinct ids: no ties in TopK
    print(f"\n1. Token ids in range: {token_ids.tolist()}\n", file=out)
    in_range = _parity(model, token_ids, built)
    print(report.text(in_range), file=out)

    token_ids = token_ids.copy()
    token_ids[0, 1], token_ids[1, 4] = 40, -33  # the vocabulary has 32 entries
    print(f"\n2. Two token ids out of range (40 and -33 with 32 rows): {token_ids.tolist()}\n", file=out)
    out_of_range = _parity(model, token_ids, built)
    print(report.text(out_of_range), file=out)
    _side_by_side(out_of_range.parity, token_ids, out)
    print(
        "\nIn range, every backend that ran agrees with DirectML's semantics"
        + (" bit for bit." if in_range.parity.passed else ": NOT SO, see above.")
        + f" Out of range (out_of_bounds={out_of_bounds}): {report.PREDICTIONS[out_of_bounds]}; DirectML's"
        " documentation promises only that nothing fails. ONNX Runtime's CPU kernels refuse the index and OpenVINO"
        " reads zeros. The semantics, and what DirectML was measured to read: `onnx-gather docs semantics`"
        " (docs/semantics.md, installed with the package).",
        file=out,
    )
    return 0 if in_range.parity.passed else 1
