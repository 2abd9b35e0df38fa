"""Speed of the custom ops against ONNX Runtime's native kernels, measured side by side in one process.

For each case: the native ONNX op, the *floor* (native time plus one copy each of data, indices and
output: the copies onnxruntime-extensions makes around a Python op), the DML custom op, and the
ratios op/native and op/floor (medians). Targets: op/floor <= 1.3 on the large cases, op/native <= 3
on the tiny one. Then the lowered route, to_onnx(to_dml(model)) in plain ONNX Runtime, against the
original model: targets 1.1x with out_of_bounds=error, 3x with clamp; with directml (the default) 1.2x for
Gather and no more than clamp for GatherElements while every index is in bounds, and 3x when 1% of the indices
are out of bounds (that route checked against onnx_gather.core.semantics).
Run by hand: python tools/bench.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnx
import onnxruntime

import onnx_gather
from onnx_gather.conformance import provider_door as conformance
from onnx_gather.core import contract
from onnx_gather.core.form import dml_form
from onnx_gather.graphs.emit import single_node_model
from onnx_gather.graphs.types import value_types
from onnx_gather.runtime import ops

# name, op, data shape, indices shape (standard ONNX), axis (GatherND: batch_dims; its tuples have 1 coordinate)
CASES = [
    ("Gather 4000x1000 axis 0, 4000 indices", "Gather", (4000, 1000), (4000,), 0),
    ("Gather 64x512x64 axis 1, 256 indices", "Gather", (64, 512, 64), (256,), 1),
    ("GatherElements 2000x2000 axis 0", "GatherElements", (2000, 2000), (2000, 2000), 0),
    ("GatherElements 2000x2000 axis 1", "GatherElements", (2000, 2000), (2000, 2000), 1),
    ("GatherND 8x512x256, batch 1, 8x1024 tuples", "GatherND", (8, 512, 256), (8, 1024, 1), 1),
    ("Gather 8x16 axis 0, 2 indices (tiny)", "Gather", (8, 16), (2,), 0),
]


def _median_seconds(function, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _options() -> onnxruntime.SessionOptions:
    # Several sessions take turns here: threads left spinning by one would slow down the next.
    options = onnxruntime.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def _plain(model) -> onnxruntime.InferenceSession:
    return onnxruntime.InferenceSession(model.SerializeToString(), _options(), providers=["CPUExecutionProvider"])


def _typed(model, feeds):
    """Declare the feeds' shapes on the model's inputs, as a real model would."""
    for value in model.graph.input:
        shape = onnx.helper.make_tensor_type_proto(1, feeds[value.name].shape).tensor_type.shape
        value.type.tensor_type.shape.CopyFrom(shape)
    return model


def _sessions(op: str, data: np.ndarray, indices: np.ndarray, axis: int):
    """Sessions and feeds: the native op; the DML op (DML form as docs/semantics.md section 6); the lowered routes."""
    feeds = {"input": data, "indices": indices}
    attribute = {"batch_dims": axis} if op == "GatherND" else {"axis": axis}
    original = _typed(single_node_model(op, data.dtype, indices.dtype, domain="", **attribute), feeds)
    assert value_types(original)
    sessions = {"native": (_plain(original), feeds)}
    nd = op == "GatherND"  # whose ``axis`` here is batch_dims
    form = dml_form(op, data.ndim, indices.ndim, 0 if nd else axis, axis if nd else 0, indices.shape[-1] if nd else 0)
    dml_data = data.reshape((1,) * form.input_ones + data.shape)
    dml_indices = indices.reshape((1,) * form.indices_ones + indices.shape)
    attributes = form.attributes
    model = single_node_model(
        contract.BY_STANDARD[op].op_type, data.dtype, indices.dtype, out_of_bounds="directml", **attributes
    )
    dml_feeds = {"input": dml_data, "indices": dml_indices}
    sessions["op"] = (onnx_gather.InferenceSession(model, _options()), dml_feeds)
    # The same op in a plain session: what onnx_gather.InferenceSession.run adds (Ctrl-C, the ops' errors) per run
    plain = onnxruntime.InferenceSession(
        model.SerializeToString(), ops.register(_options()), providers=["CPUExecutionProvider"]
    )
    sessions["plain op"] = (plain, dml_feeds)
    for mode in MODES:
        lowered = onnx_gather.to_onnx(onnx_gather.to_dml(original, out_of_bounds=mode))
        sessions[f"lowered {mode}"] = (_plain(lowered), feeds)
    return sessions


MODES = ("error", "clamp", "directml")


def _outside(indices: np.ndarray, size: int) -> np.ndarray:
    """``indices`` with every hundredth value out of bounds, by turns just past the end, far, and negative."""
    result = indices.copy().reshape(-1)
    picks = result[::100]
    picks += np.array([size, 10**6, -(10**6)], np.int64)[np.arange(picks.size) % 3]
    result[::100] = picks
    return result.reshape(indices.shape)


def measure(op: str, data_shape, indices_shape, axis: int, runs: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    data = rng.random(data_shape, dtype=np.float32)
    indices = rng.integers(0, data_shape[axis], indices_shape, dtype=np.int64)
    sessions = _sessions(op, data, indices, axis)
    expected = sessions["native"][0].run(None, sessions["native"][1])[0]
    for name, (session, feeds) in sessions.items():
        output = session.run(None, feeds)[0].reshape(expected.shape)
        assert output.tobytes() == expected.tobytes(), f"{name} disagrees with the native op"
    routes = {name: (lambda s=session, f=feeds: s.run(None, f)) for name, (session, feeds) in sessions.items()}
    outside = {"input": data, "indices": _outside(indices, data_shape[axis])}
    directml = sessions["lowered directml"][0]
    case = (
        conformance.GatherCase(op, data, outside["indices"], 0, axis)
        if op == "GatherND"
        else conformance.GatherCase(op, data, outside["indices"], axis)
    )
    reference = conformance.expected(case)
    assert directml.run(None, outside)[0].tobytes() == reference.tobytes(), "lowered directml disagrees"
    routes["lowered directml outside"] = lambda: directml.run(None, outside)
    routes["copies"] = lambda: (data.copy(), indices.copy(), expected.copy())
    samples = {name: [] for name in routes}
    # Interleaved rounds in a new order each time: a route is slower right after one that freed large buffers.
    order = np.random.default_rng(1)
    for _ in range(runs):
        for name in order.permutation(list(routes)):
            samples[name].append(_median_seconds(routes[name], 1))
    result = {name: statistics.median(values) for name, values in samples.items()}
    result["floor"] = result["native"] + result["copies"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="rounds per case (medians are printed); at least 9")
    args = parser.parse_args()
    runs = max(args.runs, 9)
    print(f"onnxruntime {onnxruntime.__version__}, numpy {np.__version__}, medians of {runs} runs (tiny: {runs * 10})")
    print(
        f"{'case':<40} {'native ms':>10} {'floor ms':>9} {'op ms':>8} {'op/native':>10} {'op/floor':>9}"
        + "".join(f" {f'lowered {mode}/native':>24}" for mode in (*MODES, "directml 1% outside"))
    )
    worst, worst_lowered = 0.0, dict.fromkeys((*MODES, "directml outside"), 0.0)
    for name, op, data_shape, indices_shape, axis in CASES:
        tiny = "tiny" in name
        r = measure(op, data_shape, indices_shape, axis, runs * 10 if tiny else runs)
        op_native, op_floor = r["op"] / r["native"], r["op"] / r["floor"]
        lowered = {mode: r[f"lowered {mode}"] / r["native"] for mode in worst_lowered}
        if not tiny:
            worst = max(worst, op_floor)
            worst_lowered = {mode: max(worst_lowered[mode], lowered[mode]) for mode in lowered}
        print(
            f"{name:<40} {r['native'] * 1e3:>10.3f} {r['floor'] * 1e3:>9.3f} {r['op'] * 1e3:>8.3f} "
            f"{op_native:>10.2f} {op_floor:>9.2f}" + "".join(f" {lowered[mode]:>24.2f}" for mode in worst_lowered)
        )
        if tiny:
            us = {route: r[route] * 1e6 for route in ("native", "plain op", "op")}
            print(
                f"  tiny: native {us['native']:.1f} us, the op in a plain session {us['plain op']:.1f} us, in "
                f"onnx_gather.InferenceSession {us['op']:.1f} us: op/native {op_native:.2f} (target <= 3); per-run "
                f"overhead of onnx_gather.InferenceSession over a plain session {us['op'] - us['plain op']:.1f} us"
            )
    lowered_line = ", ".join(f"{mode} {ratio:.2f}" for mode, ratio in worst_lowered.items())
    print(f"worst lowered/native on the large cases: {lowered_line}")
    print(f"worst op/floor: {worst:.2f}")


if __name__ == "__main__":
    main()
