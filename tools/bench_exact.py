"""What the exact (float64) yardstick costs beside ONNX Runtime's CPU, as parity pays both, side by side in one process.

Per model (the third-party models of tools/bench_models.py where tools/fetch_models.py fetched them, the bundled
models and the rounding-only models of tools/rounding_models.py): the median time of the ``cpu`` backend's run (a
session made and run, as parity makes it) and of the ``exact`` backend's (widening, routing and every stretch's
session or evaluator), their ratio, the nodes each route took, and the CPU's largest distance from the float64 values
relative to their scale. The two take turns run by run, so that a slow spell of the (shared) machine falls on both.
Run by hand: python tools/bench_exact.py [--runs N] [NAME ...]
"""

from __future__ import annotations

import argparse
import functools
import tempfile
from pathlib import Path

import bench_models
import numpy as np
import onnx
import rounding_models

from onnx_gather.runtime import backends


def _cases(folder: Path) -> dict[str, tuple[Path, dict[str, np.ndarray]]]:
    cases = bench_models.own_cases()
    for name in bench_models.MODELS:
        if found := bench_models.case(name):
            cases[name] = found
    for name, build in rounding_models.BUILDERS.items():
        model, feeds = build()
        onnx.save(model, folder / f"{name}.onnx")
        cases[name] = (folder / f"{name}.onnx", feeds)
    return cases


def measure(path: Path, feeds: dict[str, np.ndarray], runs: int) -> tuple[dict[str, float], backends.Outcome, dict]:
    """Median seconds of the cpu and exact backends on the model, the exact outcome and the cpu's outputs."""
    model = backends.Model.read(path)
    built = {name: backends.create(name) for name in ("cpu", "exact")}
    outcomes = {name: backend.run(model, feeds) for name, backend in built.items()}
    calls = {name: functools.partial(backend.run, model, feeds) for name, backend in built.items()}
    return bench_models.take_turns(calls, runs), outcomes["exact"], outcomes["cpu"].outputs


def _drift(cpu: dict[str, np.ndarray], exact: dict[str, np.ndarray]) -> str:
    """The CPU's largest distance from the float64 values, relative to their largest magnitude, over float outputs."""
    worst = 0.0
    for name, array in cpu.items():
        if array.dtype.kind == "f" and array.size:
            wide = exact[name]
            both = np.isfinite(array) & np.isfinite(wide)
            scale = np.abs(wide[both]).max() if both.any() else 0.0
            if scale:
                worst = max(worst, float(np.abs(array[both] - wide[both]).max() / scale))
    return f"{worst:.2g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per backend and model (medians are printed)")
    parser.add_argument("names", nargs="*", help="models to run (default: all)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-exact-") as folder:
        cases = _cases(Path(folder))
        print(f"{'model':22} {'cpu s':>8} {'exact s':>8} {'exact/cpu':>9}  {'cpu drift':>9}  routes")
        for name, (path, feeds) in cases.items():
            if args.names and name not in args.names:
                continue
            seconds, outcome, cpu = measure(path, feeds, args.runs)
            routes = outcome.routes
            said = ", ".join(f"{route} {ops.total()}" for route, ops in routes.ops.items() if ops)
            kept = f", kept {len(routes.kept)}" if routes.kept else ""
            print(
                f"{name:22} {seconds['cpu']:8.3f} {seconds['exact']:8.3f} {seconds['exact'] / seconds['cpu']:9.1f}  "
                f"{_drift(cpu, outcome.outputs):>9}  {said}{kept}, {routes.stretches} stretches"
            )


if __name__ == "__main__":
    main()
