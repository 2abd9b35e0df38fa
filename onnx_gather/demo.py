"""``onnx-gather demo``: DirectML's documented examples, run through the custom ops in ONNX Runtime."""

from __future__ import annotations

from typing import TextIO

import numpy as np
import onnxruntime

from onnx_gather.examples import EXAMPLES
from onnx_gather.graph import single_node_model
from onnx_gather.ops import InferenceSession


def _tensor(name: str, array: np.ndarray) -> str:
    sizes = "{" + ",".join(str(s) for s in array.shape) + "}"
    values = np.array2string(array, separator=", ", max_line_width=10_000).replace("\n", "")
    return f"  {name:<8}{array.dtype.name} {sizes}: {values}"


def run(out: TextIO) -> int:
    """Print every example's tensors and whether ONNX Runtime reproduced its output; 0 if all did."""
    matched = 0
    for example in EXAMPLES:
        model = single_node_model(
            example.op_type, example.input.dtype, example.indices.dtype, out_of_bounds="clamp", **example.attributes
        )
        session = InferenceSession(model)
        (output,) = session.run(None, {"input": example.input, "indices": example.indices})
        same = output.dtype == example.output.dtype and output.shape == example.output.shape
        same = same and np.array_equal(output, example.output)
        matched += same
        attributes = " ".join(f"{k}={v}" for k, v in example.attributes.items())
        print(example.title, file=out)
        print(f"  {example.op_type} {attributes}", file=out)
        print(_tensor("input", example.input), file=out)
        print(_tensor("indices", example.indices), file=out)
        print(_tensor("output", output), file=out)
        if not same:
            print(_tensor("expected", example.output), file=out)
        print(file=out)
    verdict = "match" if matched == len(EXAMPLES) else "do NOT all match"
    print(
        f"{matched} of {len(EXAMPLES)} outputs computed by the custom ops in ONNX Runtime {onnxruntime.__version__} "
        f"{verdict} the DirectML documentation, bit for bit.",
        file=out,
    )
    return 0 if matched == len(EXAMPLES) else 1
