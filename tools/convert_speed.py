"""Converter speed and memory, run by hand: python tools/convert_speed.py [--gathers 10000] [--weights-gb 1.5]
   or its scaling alone: python tools/convert_speed.py --scaling [--sizes 1000,10000,100000]

1. A chain of N Gathers through to_dml and to_onnx, with out_of_bounds clamp and directml (the default, whose
   lowering puts DirectML's reading beside each native op: about 100 nodes per gather) (target: under 5 s for
   10,000 with clamp).
2. `onnx-gather convert` of a model with that many GB of external weights into another folder, in a child
   process whose peak resident memory is read from the kernel (target: under 500 MB for 1.5 GB).
3. The chain with its rows a graph input at opset 7, whose clamp and directml lowerings need opset 11: to_onnx raises
   the model first (onnx's version converter) and lowers it again, against the same chain at opset 11.
4. Scaling (--scaling): to_dml of chains of 1,000, 10,000 and 100,000 Gathers (directml), against ONNX Runtime's
   native kernels measured side by side in the same run: a session of the same chain made and run once (its graph,
   its Gather kernels). Printed: each time, to_dml/native, and how much each grows per tenfold nodes (10 is linear).
   (The 100,000-node conversion, once a slow test, is measured here; tests/test_load.py converts 10,000.)
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from onnx_gather.graphs.convert import convert
from onnx_gather.graphs.lowering.lower import lower
from onnx_gather.graphs.plumbing import bodies


def chain(gathers: int, opset: int = 17, rows_input: bool = False) -> onnx.ModelProto:
    """x -> Gather -> Gather -> ... with a dynamic batch, each reading rows [2, 0, 1] of the previous (a constant, or
    with ``rows_input`` a graph input ``rows``)."""
    nodes = [
        h.make_node("Gather", [f"v{k}", "rows"], [f"v{k + 1}"], name=f"gather_{k}", axis=k % 2) for k in range(gathers)
    ]
    inputs = [h.make_tensor_value_info("v0", T.FLOAT, [3, 3, "batch"])]
    initializers = []
    if rows_input:
        inputs.append(h.make_tensor_value_info("rows", T.INT64, [3]))
    else:
        initializers.append(numpy_helper.from_array(np.array([2, 0, 1], np.int64), "rows"))
    output = h.make_tensor_value_info(f"v{gathers}", T.FLOAT, [3, 3, "batch"])
    graph = h.make_graph(nodes, "chain", inputs, [output], initializer=initializers)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)], ir_version=7 if opset < 15 else 10)


def time_chain(gathers: int, mode: str, opset: int = 17, rows_input: bool = False) -> None:
    model = chain(gathers, opset, rows_input)
    start = time.perf_counter()
    converted, report = convert(model, out_of_bounds=mode)
    middle = time.perf_counter()
    lowered, lowering = lower(converted)
    end = time.perf_counter()
    assert len(report.changed) == gathers and not report.left and not lowering.left
    nodes = sum(len(body.nodes) for body in bodies(lowered))
    raised = f"; {lowering.notes[0]}" if lowering.notes else ""
    print(
        f"chain of {gathers} Gathers{', rows a graph input' if rows_input else ''} at opset {opset}, "
        f"out_of_bounds={mode}: to_dml {middle - start:.2f} s ({len(converted.graph.node)} nodes), "
        f"to_onnx {end - middle:.2f} s ({nodes} nodes in all){raised}"
    )


def large_model(folder: Path, gigabytes: float) -> Path:
    """An embedding table of ``gigabytes`` as external data, written without holding it in memory."""
    width = 1024
    rows = int(gigabytes * 1e9) // (4 * width)
    table = onnx.TensorProto(name="table", data_type=T.FLOAT, dims=[rows, width])
    table.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", "table.bin"), ("offset", "0"), ("length", str(rows * width * 4))):
        table.external_data.add(key=key, value=value)
    with open(folder / "table.bin", "wb") as data:
        block = np.random.default_rng(0).random(16 * 1024 * 1024 // 4, np.float32).tobytes()
        written = 0
        while written < rows * width * 4:
            written += data.write(block[: rows * width * 4 - written])
    graph = h.make_graph(
        [h.make_node("Gather", ["table", "ids"], ["vectors"], name="embed", axis=0)],
        "large",
        [h.make_tensor_value_info("ids", T.INT64, ["batch"])],
        [h.make_tensor_value_info("vectors", T.FLOAT, ["batch", width])],
        initializer=[table],
    )
    path = folder / "large.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10), path)
    return path


def measure_large(gigabytes: float) -> None:
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as folder:
        source = large_model(Path(folder), gigabytes)
        target = Path(folder) / "out" / "large.dml.onnx"
        target.parent.mkdir()  # convert writes into a folder that exists
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "onnx_gather", "convert", str(source), "-o", str(target)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        seconds = time.perf_counter() - start
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        copied = sum(f.stat().st_size for f in target.parent.iterdir() if f != target) / 1e9  # named after target
        print(
            f"convert with {gigabytes:.1f} GB of external weights into another folder: {seconds:.1f} s, "
            f"peak resident memory {peak_mb:.0f} MB, {copied:.2f} GB of external data copied"
        )


def _native(model: onnx.ModelProto) -> float:
    """Seconds for ONNX Runtime's native kernels to take ``model``: a CPU session made, then run once."""
    start = time.perf_counter()
    options = onnxruntime.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    session.run(None, {"v0": np.arange(9, dtype=np.float32).reshape(3, 3, 1)})
    return time.perf_counter() - start


def scaling(sizes: list[int], mode: str = "directml") -> list[tuple[int, float, float]]:
    """to_dml of a chain of each size against the native session of the same chain: (gathers, to_dml s, native s),
    printed with the ratios."""
    rows = []
    for gathers in sizes:
        model = chain(gathers)
        native = _native(model)
        start = time.perf_counter()
        converted, report = convert(model, out_of_bounds=mode)
        seconds = time.perf_counter() - start
        assert len(report.changed) == gathers and not report.left and len(converted.graph.node) == 3 * gathers
        rows.append((gathers, seconds, native))
    print(
        f"onnxruntime {onnxruntime.__version__}: to_dml (out_of_bounds={mode}) of a chain of N Gathers against "
        "a native CPU session of it (made and run once)"
    )
    previous = None
    for gathers, seconds, native in rows:
        growth = ""
        if previous is not None:
            factor = gathers / previous[0]
            growth = f"; x{factor:g} nodes: to_dml x{seconds / previous[1]:.1f}, native x{native / previous[2]:.1f}"
        print(
            f"  {gathers:>7} Gathers: to_dml {seconds:.3f} s, native {native:.3f} s, "
            f"to_dml/native {seconds / native:.2f}{growth}"
        )
        previous = (gathers, seconds, native)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gathers", type=int, default=10_000)
    parser.add_argument("--weights-gb", type=float, default=1.5)
    parser.add_argument("--scaling", action="store_true", help="only the scaling of to_dml against native (4.)")
    parser.add_argument("--sizes", default="1000,10000,100000", help="chain lengths for --scaling")
    args = parser.parse_args()
    if args.scaling:
        scaling([int(size) for size in args.sizes.split(",")])
        return
    measure_large(args.weights_gb)  # first: a child forked later would start as large as this process has grown
    for mode in ("clamp", "directml"):
        time_chain(args.gathers, mode)
    for mode in ("clamp", "directml"):
        for opset in (7, 11):
            time_chain(args.gathers, mode, opset, rows_input=True)


if __name__ == "__main__":
    main()
