"""What lowering costs a real model, run by hand: python tools/lowering_cost.py [--repeat 5] [MODEL ...]

Per model (by default every third-party model tests/third_party holds, see tools/fetch_models.py): its nodes
(subgraphs included) and the median time ONNX Runtime takes to create a session of it, for the original (ONNX
Runtime's native kernels), its DML form (the custom ops) and its lowered form, side by side in the same run, with
the ratios of the lowered form to the original, and the warnings ONNX Runtime printed while creating the lowered
form's session.

``--scatters``: what a lowered scatter costs to run, against ONNX Runtime's native ScatterND and ScatterElements on
the same inputs (in range), for each out_of_bounds mode: median run times and their ratios, side by side.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper

from onnx_gather.graphs import model_io
from onnx_gather.graphs.convert import convert
from onnx_gather.graphs.lowering.lower import lower, to_onnx
from onnx_gather.graphs.plumbing import bodies

THIRD_PARTY = Path(__file__).resolve().parent.parent / "tests" / "third_party"


def _nodes(model: onnx.ModelProto) -> int:
    return sum(len(body.nodes) for body in bodies(model))


_CREATE = """
import sys, time, onnxruntime
custom_ops = sys.argv[2] == "1"
if custom_ops:
    import onnx_gather
options = onnx_gather.session_options() if custom_ops else onnxruntime.SessionOptions()
options.intra_op_num_threads = 1
options.log_severity_level = 3
start = time.perf_counter()
onnxruntime.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
print(time.perf_counter() - start)
"""


def _create(path: Path, custom_ops: bool) -> float:
    """Seconds to create one session, in a fresh process (as a program that loads a model pays it; one thread, as
    the tests and most servers create them; warnings silenced)."""
    result = subprocess.run(
        [sys.executable, "-c", _CREATE, str(path), str(int(custom_ops))], capture_output=True, text=True, check=True
    )
    return float(result.stdout.split()[-1])


def _session_seconds(paths: dict[str, Path], repeat: int) -> dict[str, float]:
    """The median session creation of each form, the forms taking turns so that a slow spell of the machine falls on
    all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(repeat):
        for name, path in paths.items():
            times[name].append(_create(path, name == "dml"))
    return {name: statistics.median(values) for name, values in times.items()}


def _warnings_of(path: Path) -> list[str]:
    """What ONNX Runtime writes to stderr (its warnings) while creating a session of ``path``."""
    with tempfile.TemporaryFile() as captured:
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        return [line for line in captured.read().decode(errors="replace").splitlines() if line.strip()]


def measure(path: Path, mode: str, repeat: int, folder: Path) -> tuple[list[str], list[str]]:
    """One row of the table, and the warnings the lowered form's session printed."""
    original = model_io.load(path)
    converted, conversion = convert(original, out_of_bounds=mode)
    lowered, _ = lower(converted)
    forms = {"dml": converted, "lowered": lowered}
    paths = {"original": path}
    for name, model in forms.items():
        paths[name] = folder / f"{path.stem}.{name}.onnx"
        model_io.save(model, paths[name], path)
    nodes = {"original": _nodes(original), "dml": _nodes(converted), "lowered": _nodes(lowered)}
    seconds = _session_seconds(paths, repeat)
    converted_nodes = len(conversion.changed)
    per_node = (nodes["lowered"] - nodes["original"]) / converted_nodes if converted_nodes else 0.0
    row = [
        path.name,
        str(converted_nodes),
        str(nodes["original"]),
        str(nodes["dml"]),
        str(nodes["lowered"]),
        f"{per_node:.1f}",
        f"{1000 * seconds['original']:.0f}",
        f"{1000 * seconds['dml']:.0f}",
        f"{1000 * seconds['lowered']:.0f}",
        f"{seconds['lowered'] / seconds['original']:.2f}",
    ]
    return row, _warnings_of(paths["lowered"])


# (op, data shape, indices shape, updates shape, axis): rows of a matrix, elements along an axis, a batch of slices.
SCATTERS = (
    ("ScatterND", (4096, 1024), (512, 1), (512, 1024), 0),
    ("ScatterND", (64, 512, 64), (64, 64, 2), (64, 64, 64), 0),
    ("ScatterND", (1 << 20,), (1 << 16, 1), (1 << 16,), 0),
    ("ScatterElements", (2048, 2048), (2048, 256), (2048, 256), 1),
    ("ScatterElements", (4096, 1024), (512, 1024), (512, 1024), 0),
)


def _scatter_model(op: str, data: tuple, indices: tuple, updates: tuple, axis: int) -> onnx.ModelProto:
    node = helper.make_node(op, ["data", "indices", "updates"], ["output"], **({"axis": axis} if axis else {}))
    inputs = [
        helper.make_tensor_value_info(name, kind, list(shape))
        for name, kind, shape in (
            ("data", TensorProto.FLOAT, data),
            ("indices", TensorProto.INT64, indices),
            ("updates", TensorProto.FLOAT, updates),
        )
    ]
    output = helper.make_tensor_value_info("output", TensorProto.FLOAT, list(data))
    graph = helper.make_graph([node], op, inputs, [output])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)


def _scatter_feeds(op: str, data: tuple, indices: tuple, updates: tuple, axis: int) -> dict[str, np.ndarray]:
    """In-range indices: distinct rows and tuples for ScatterND, random ones along the axis for ScatterElements."""
    rng = np.random.default_rng(0)
    if op == "ScatterND":
        k, count = indices[-1], int(np.prod(indices[:-1]))
        flat = rng.choice(int(np.prod(data[:k])), count, replace=False)
        chosen = np.stack(np.unravel_index(flat, data[:k]), axis=-1).reshape(indices)
    else:
        chosen = rng.integers(0, data[axis], indices)
    return {
        "data": rng.standard_normal(data, dtype=np.float32),
        "indices": chosen.astype(np.int64),
        "updates": rng.standard_normal(updates, dtype=np.float32),
    }


def _run_seconds(model: onnx.ModelProto, feeds: dict[str, np.ndarray], repeat: int) -> float:
    """The median of ``repeat`` runs (after one to warm up), on one thread."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    session.run(None, feeds)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def scatter_costs(repeat: int) -> None:
    """The lowered scatters' run times against the native op's, each mode side by side."""
    modes = ("directml", "clamp", "error")
    header = ["op", "data", "updates", "ms native", *(f"ms {m}" for m in modes), *(f"x {m}" for m in modes)]
    rows = []
    for op, data, indices, updates, axis in SCATTERS:
        model, feeds = (
            _scatter_model(op, data, indices, updates, axis),
            _scatter_feeds(op, data, indices, updates, axis),
        )
        native = _run_seconds(model, feeds, repeat)
        lowered = [_run_seconds(to_onnx(convert(model, out_of_bounds=m)[0]), feeds, repeat) for m in modes]
        shapes = ["x".join(map(str, shape)) for shape in (data, updates)]
        rows.append(
            [op, *shapes, f"{1000 * native:.2f}", *(f"{1000 * t:.2f}" for t in lowered)]
            + [f"{t / native:.2f}" for t in lowered]
        )
        print(f"measured {op} {shapes[0]}", file=sys.stderr, flush=True)
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    for row in (header, *rows):
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))
    print(f"(run time: median of {repeat} runs after one, one thread, FLOAT32; x = lowered / native)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path, help="models (default: tests/third_party/*/*.onnx)")
    parser.add_argument("--repeat", type=int, default=5, help="session creations per form (the median is shown)")
    parser.add_argument("--mode", default="directml", help="out_of_bounds of the DML form (default directml)")
    parser.add_argument("--scatters", action="store_true", help="lowered scatters' run times against the native op's")
    args = parser.parse_args()
    if args.scatters:
        scatter_costs(max(args.repeat, 20))
        return
    paths = args.models or sorted(THIRD_PARTY.glob("*/*.onnx"))
    if not paths:
        sys.exit(f"no models: run python tools/fetch_models.py first, or name some ({THIRD_PARTY} is empty)")
    header = ["model", "DML nodes", "nodes", "dml", "lowered", "added/node", "ms orig", "ms dml", "ms lowered", "x"]
    rows, warned = [], {}
    with tempfile.TemporaryDirectory() as folder:
        for path in paths:
            row, warnings = measure(path, args.mode, args.repeat, Path(folder))
            rows.append(row)
            if warnings:
                warned[path.name] = warnings
            print(f"measured {path}", file=sys.stderr, flush=True)
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    for row in (header, *rows):
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))
    print(
        f"(session creation: median of {args.repeat}, each in a new process, the forms taking turns, one thread; "
        f"x = lowered / original; "
        f"out_of_bounds={args.mode})"
    )
    for name, warnings in warned.items():
        print(f"{name}: {len(warnings)} lines on stderr while creating the lowered session, first: {warnings[0]}")
    if not warned:
        print("No model's lowered form printed a warning while its session was created.")


if __name__ == "__main__":
    main()
