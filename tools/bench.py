"""Speed of the custom ops against ONNX Runtime's native kernels, measured side by side in one process.

For each case: the native ONNX op, the *floor* (native time plus one copy each of data, indices and
output: the copies onnxruntime-extensions makes around a Python op), the DML custom op, and the
ratios op/native and op/floor (medians). Targets: op/floor <= 1.5 on the large cases, op/native <= 3
on the tiny one. Run by hand: python tools/bench.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnxruntime

import onnx_gather
from onnx_gather.graph import single_node_model

# name, op, data shape, indices shape (standard ONNX), axis
CASES = [
    ("Gather 4000x1000 axis 0, 4000 indices", "Gather", (4000, 1000), (4000,), 0),
    ("Gather 64x512x64 axis 1, 256 indices", "Gather", (64, 512, 64), (256,), 1),
    ("GatherElements 2000x2000 axis 0", "GatherElements", (2000, 2000), (2000, 2000), 0),
    ("GatherElements 2000x2000 axis 1", "GatherElements", (2000, 2000), (2000, 2000), 1),
    ("Gather 8x16 axis 0, 2 indices (tiny)", "Gather", (8, 16), (2,), 0),
]


def _median_seconds(function, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _sessions(op: str, data: np.ndarray, indices: np.ndarray, axis: int):
    """The native session and feeds, and the DML session and feeds (DML form as SPEC.md section 6)."""
    native = onnxruntime.InferenceSession(
        single_node_model(op, data.dtype, indices.dtype, domain="", axis=axis).SerializeToString(),
        providers=["CPUExecutionProvider"],
    )
    if op == "Gather":
        n = max(data.ndim, indices.ndim, data.ndim + indices.ndim - 1)
        dml_data = data.reshape((1,) * (n - data.ndim) + data.shape)
        dml_indices = indices.reshape((1,) * (n - indices.ndim) + indices.shape)
        attributes = {"axis": axis + n - data.ndim, "index_dimensions": indices.ndim}
    else:
        dml_data, dml_indices, attributes = data, indices, {"axis": axis}
    model = single_node_model(f"Dml{op}", data.dtype, indices.dtype, out_of_bounds="clamp", **attributes)
    dml = onnx_gather.InferenceSession(model)
    return (native, {"input": data, "indices": indices}), (dml, {"input": dml_data, "indices": dml_indices})


def measure(op: str, data_shape, indices_shape, axis: int, runs: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    data = rng.random(data_shape, dtype=np.float32)
    indices = rng.integers(0, data_shape[axis], indices_shape, dtype=np.int64)
    (native, native_feeds), (dml, dml_feeds) = _sessions(op, data, indices, axis)
    expected = native.run(None, native_feeds)[0]
    output = dml.run(None, dml_feeds)[0]
    assert output.tobytes() == expected.tobytes(), "the custom op disagrees with the native op"
    samples = {"native": [], "copies": [], "op": []}
    # Interleaved rounds, so that both sides see the same machine state.
    for _ in range(runs):
        samples["native"].append(_median_seconds(lambda: native.run(None, native_feeds), 1))
        samples["copies"].append(_median_seconds(lambda: (data.copy(), indices.copy(), expected.copy()), 1))
        samples["op"].append(_median_seconds(lambda: dml.run(None, dml_feeds), 1))
    result = {name: statistics.median(values) for name, values in samples.items()}
    result["floor"] = result["native"] + result["copies"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="rounds per case (medians are printed); at least 9")
    args = parser.parse_args()
    runs = max(args.runs, 9)
    print(f"onnxruntime {onnxruntime.__version__}, numpy {np.__version__}, medians of {runs} runs (tiny: {runs * 10})")
    print(f"{'case':<40} {'native ms':>10} {'floor ms':>10} {'op ms':>10} {'op/native':>10} {'op/floor':>9}")
    worst = 0.0
    for name, op, data_shape, indices_shape, axis in CASES:
        tiny = "tiny" in name
        r = measure(op, data_shape, indices_shape, axis, runs * 10 if tiny else runs)
        op_native, op_floor = r["op"] / r["native"], r["op"] / r["floor"]
        if not tiny:
            worst = max(worst, op_floor)
        print(
            f"{name:<40} {r['native'] * 1e3:>10.3f} {r['floor'] * 1e3:>10.3f} {r['op'] * 1e3:>10.3f} "
            f"{op_native:>10.2f} {op_floor:>9.2f}"
        )
    print(f"worst op/floor: {worst:.2f}")


if __name__ == "__main__":
    main()
