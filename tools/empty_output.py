"""The experiment of docs/semantics.md section 9: an empty output of ONNX Runtime's DirectML provider leaves the others
it copies back from the device unwritten. Each run is a fresh process (Wine, the runner and a new session).

Run by hand, where real DirectML is set up: python tools/empty_output.py [--processes 5] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = """
import json, sys
import numpy as np
from onnx import TensorProto as T, helper as h
from onnx_gather.directml.worker import Runner

size, runs = int(sys.argv[1]), int(sys.argv[2])
graph = h.make_graph(
    [h.make_node("Neg", ["x"], ["y"]), h.make_node("Neg", ["e"], ["z"]), h.make_node("Shape", ["x"], ["s"])],
    "empty_output", [h.make_tensor_value_info("x", T.FLOAT, [3]), h.make_tensor_value_info("e", T.FLOAT, ["n"])],
    [h.make_tensor_value_info("y", T.FLOAT, [3]), h.make_tensor_value_info("z", T.FLOAT, ["n"]),
     h.make_tensor_value_info("s", T.INT64, [1])])
model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
with Runner() as runner:
    loaded = runner.load(model, fallback=True)
    feeds = {"x": np.array([1, 2, 3], np.float32), "e": np.zeros(size, np.float32)}
    outputs = [runner.run(loaded, feeds) for _ in range(runs)]
print(json.dumps([[o["y"].tolist(), o["s"].tolist()] for o in outputs]))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3, help="runs per process")
    args = parser.parse_args()
    for size in (0, 1):
        right = total = 0
        for _ in range(args.processes):
            done = subprocess.run(
                [sys.executable, "-c", CHILD, str(size), str(args.runs)], capture_output=True, text=True, check=True
            )
            for y, s in json.loads(done.stdout):
                right += y == [-1.0, -2.0, -3.0] and s == [3]
                total += 1
                example = y
        print(
            f"e of {size} element(s): y right in {right} of {total} runs over {args.processes} fresh processes "
            f"(last y: {example})"
        )


if __name__ == "__main__":
    main()
