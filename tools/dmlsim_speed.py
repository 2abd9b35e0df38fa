"""What the dmlsim backend costs beside ONNX Runtime's CPU and real DirectML, as parity pays them, in one process.

Per model (the project's own test models in models/ and the third-party models of tools/bench_models.py, fetched by
tools/fetch_models.py, on the inputs that tool gives them): the median time of one call of each backend's ``run``
(``backends.Model.read(path)``, then ``backend.run(model, feeds)``, as ``parity`` calls it), with ONNX Runtime's
default threads:

* ``cpu``: the model in ONNX Runtime's native CPU kernels, its session made each run;
* ``dmlsim first``: a fresh Model each run, so the run builds the emulation (``check``, ``to_dml``, ``emulate`` and
  its lowering) before it makes the session and runs;
* ``dmlsim``: steady, the emulation cached on the Model by the first run, the session made each run as the backend
  does;
* ``dml``: real DirectML under Wine (the runner loads, runs and frees the model each run); ``--no-dml`` leaves it out.

with the ratios of each to cpu's. A run that raises the backend's failure (DirectML's, or dmlsim's emulation of it)
is timed all the same, as parity pays it, and said under the table. Each route is called once before any timing;
then the routes take turns run by run in a new order each round, so that a slow spell of the (shared) machine falls
on all of them alike.
Target: dmlsim (steady) within 2 times cpu on every test model.
Run by hand: python tools/dmlsim_speed.py [--runs N] [--no-dml] [NAME ...] (a NAME runs the models whose name holds it)
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable

import bench_models
import numpy as np
import onnxruntime

from onnx_gather.directml.process import DirectMlError
from onnx_gather.runtime import backends
from onnx_gather.runtime.dmlsim import EmulatedFailure

ROUTES = ("cpu", "dmlsim first", "dmlsim", "dml")


def _timed(call: Callable[[], object], failures: dict[str, str], route: str) -> Callable[[], None]:
    """``call``, its backend's failure (DirectML's or dmlsim's) kept in ``failures`` under ``route``."""

    def run() -> None:
        try:
            call()
        except (EmulatedFailure, DirectMlError) as failure:
            failures[route] = str(failure).splitlines()[0]

    return run


def measure(
    model: backends.Model, feeds: dict[str, np.ndarray], routes: tuple[str, ...], runs: int
) -> tuple[dict[str, float], dict[str, str]]:
    """Median seconds of one run per route, and the failure each route that failed raised."""
    built = {name: backends.create(name) for name in ("cpu", "dmlsim", "dml") if name in routes}
    calls = {
        "cpu": lambda: built["cpu"].run(model, feeds),
        # a fresh Model of the same proto: no emulation cached, so the run builds it
        "dmlsim first": lambda: built["dmlsim"].run(dataclasses.replace(model, conversions={}, emulations={}), feeds),
        "dmlsim": lambda: built["dmlsim"].run(model, feeds),
        "dml": lambda: built["dml"].run(model, feeds),
    }
    failures: dict[str, str] = {}
    timed = {route: _timed(calls[route], failures, route) for route in routes}
    return bench_models.take_turns(timed, runs), failures


def _cases(names: list[str]) -> dict[str, tuple[backends.Model, dict[str, np.ndarray]] | None]:
    """The models to run, by name, read as parity reads them (None: not fetched)."""
    own = bench_models.own_cases()
    cases: dict[str, tuple[backends.Model, dict[str, np.ndarray]] | None] = {}
    for name in [*own, *bench_models.MODELS]:
        if names and not any(part.lower() in name.lower() for part in names):
            continue
        found = own[name] if name in own else bench_models.case(name)
        cases[name] = None if found is None else (backends.Model.read(found[0]), found[1])
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11, help="runs per route and model (medians are printed)")
    parser.add_argument("--no-dml", action="store_true", help="leave real DirectML out")
    parser.add_argument("names", nargs="*", help="run only the models whose name holds one of these (default: all)")
    args = parser.parse_args()
    routes = ROUTES
    why = None if args.no_dml else backends.create("dml").unavailable()
    if args.no_dml or why:
        routes = ROUTES[:-1]
    cases = _cases(args.names)
    if not cases:
        parser.error(f"no model's name holds {' or '.join(map(repr, args.names))}")
    print(f"onnxruntime {onnxruntime.__version__}, medians of {args.runs} runs" + (f"; no dml: {why}" if why else ""))
    header = f"{'model':<20} {'cpu ms':>9} {'first ms':>9} {'dmlsim ms':>10} {'first/cpu':>10} {'dmlsim/cpu':>11}"
    print(header + (f" {'dml ms':>9} {'dml/cpu':>8}" if "dml" in routes else ""))
    worst, failed = 0.0, []
    for name, found in cases.items():
        if found is None:
            print(f"{name:<20} missing (python tools/fetch_models.py fetches it)")
            continue
        s, failures = measure(*found, routes, args.runs)
        worst = max(worst, s["dmlsim"] / s["cpu"])
        line = (
            f"{name:<20} {s['cpu'] * 1e3:>9.2f} {s['dmlsim first'] * 1e3:>9.2f} {s['dmlsim'] * 1e3:>10.2f} "
            f"{s['dmlsim first'] / s['cpu']:>10.2f} {s['dmlsim'] / s['cpu']:>11.2f}"
        )
        if "dml" in routes:
            line += f" {s['dml'] * 1e3:>9.2f} {s['dml'] / s['cpu']:>8.2f}"
        print(line + (" *" if failures else ""))
        # the first run fails as the steady one does: said once
        failed.extend(f"* {name}, {route}: {failure}" for route, failure in failures.items() if route != "dmlsim first")
    print(f"worst dmlsim/cpu: {worst:.2f} (target: 2)")
    for line in failed:
        print(line)


if __name__ == "__main__":
    main()
