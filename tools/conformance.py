"""Run the real-DirectML conformance harness by hand: random gathers on DirectML, the semantics and the custom ops.

python tools/conformance.py [--seed N] [--count N] [--out-of-bounds F] [--beyond-int32 F] [--mode clamp] [--show K]
                            [--nd]
python tools/conformance.py --direct [--seed N] [--count N] [--show K]
python tools/conformance.py --scatter [--seed N] [--count N] [--show K]

With --scatter: random ScatterElements and ScatterND (onnx_gather.conformance.scatters) through both doors, the
provider and DirectML called directly, against onnx_gather.core.scatter; prints the counts per operator and kind.

With --direct: random operator descs over the whole domain (onnx_gather.conformance.random_descs) on DirectML called
directly, against onnx_gather.core.predict and the custom ops; prints the table per operator and kind.

Prints the per-type table (cases in range, out of bounds and with int64 values beyond int32, and how many DirectML
matches bit for bit), the time DirectML took, and the first K mismatching cases with their values. Exits 1 when
DirectML, the custom ops or the lowered graph differ from the semantics. Needs `onnx-gather setup-directml`.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

import numpy as np

from onnx_gather.conformance import direct_door as direct_conformance
from onnx_gather.conformance import provider_door as conformance
from onnx_gather.conformance import random_descs, scatters
from onnx_gather.core.contract import OUT_OF_BOUNDS_MODES
from onnx_gather.directml.direct import DirectRunner
from onnx_gather.directml.worker import Runner


def _show(outcome: conformance.CaseOutcome) -> str:
    case = outcome.case
    return (
        f"  {case.describe()}\n    indices   {np.array2string(case.indices.ravel()[:12])}\n"
        f"    directml  {np.array2string(outcome.directml.ravel()[:12])}\n"
        f"    expected  {np.array2string(outcome.semantics.ravel()[:12])}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--out-of-bounds", type=float, default=0.5, help="fraction of cases with out-of-bounds indices")
    parser.add_argument("--beyond-int32", type=float, default=0.1, help="fraction with int64 values beyond int32")
    parser.add_argument("--mode", choices=OUT_OF_BOUNDS_MODES, default=OUT_OF_BOUNDS_MODES[0])
    parser.add_argument("--show", type=int, default=3, help="print this many mismatching cases")
    parser.add_argument("--nd", action="store_true", help="GatherND cases (else Gather and GatherElements)")
    parser.add_argument("--direct", action="store_true", help="operator descs on DirectML called directly")
    parser.add_argument("--scatter", action="store_true", help="scatters through both doors")
    args = parser.parse_args()
    if args.scatter:
        return _scatter(args.seed, args.count, args.show)
    if args.direct:
        return _direct(args.seed, args.count, args.show)
    cases = conformance.random_gather_cases(args.seed, args.count, args.out_of_bounds, args.beyond_int32, args.nd)
    start = time.perf_counter()
    with Runner() as runner:
        run = conformance.run_cases(runner, cases, args.mode)
    print(f"seed {args.seed}, {args.count} cases, expected values from out_of_bounds={args.mode!r}")
    print(conformance.results_table(run))
    print(
        f"DirectML: {run.directml_seconds:.1f} s ({1000 * run.directml_seconds / args.count:.1f} s per 1,000 cases); "
        f"{time.perf_counter() - start:.1f} s in all with Wine's start and the custom ops"
    )
    mismatches = [o for o in run.outcomes if not o.matches]
    for outcome in mismatches[: args.show]:
        print(_show(outcome))
    routes = sum(o.ops_match and o.lowered_matches for o in run.outcomes)
    print(f"custom ops and lowered graph: {routes} of {args.count} cases bit-identical with the semantics")
    broken = [o for o in run.outcomes if not (o.matches and o.ops_match and o.lowered_matches)]
    return 1 if broken else 0


def _direct(seed: int, count: int, show: int) -> int:
    start = time.perf_counter()
    cases = random_descs.random_cases(seed, count)
    with DirectRunner() as runner:
        run = direct_conformance.run_cases(runner, cases)
    print(f"seed {seed}, {count} random descs on DirectML called directly (feature level {runner.feature_level})")
    print(direct_conformance.results_table(run))
    unpredicted = [r for r in run.results if r.predicted is None]
    print(
        f"DirectML: {run.seconds:.1f} s ({1000 * run.seconds / count:.1f} s per 1,000 descs); "
        f"{time.perf_counter() - start:.1f} s in all; {len(unpredicted)} not predicted"
    )
    for reason, n in Counter(r.reason.split(":")[0] for r in unpredicted).most_common(5):
        print(f"  not predicted: {n} x {reason}")
    for r in run.disagreements[:show]:
        print(
            f"  differs: {r.case.operator} {r.case.attributes} {r.case.input} {r.case.indices} {r.case.output}: "
            f"DirectML {r.directml.refused or 'ran'}, predicted {r.predicted and (r.predicted.refused or 'ran')}, "
            f"custom ops {r.custom_ops}"
        )
    return 1 if run.disagreements else 0


def _scatter(seed: int, count: int, show: int) -> int:
    cases = scatters.random_scatter_cases(seed, count)
    with Runner() as runner:
        provider = scatters.run_provider(runner, cases)
    with DirectRunner() as runner:
        direct = scatters.run_direct(runner, cases, seed)
    counts: Counter = Counter()
    differing = []
    for case, got, (tensor, kept) in zip(cases, provider, direct, strict=True):
        expected = case.expected().tobytes()
        key = (case.op, "out of bounds" if case.out_of_bounds else "in range")
        ok = (got.tobytes() == expected, tensor is not None and tensor.tobytes() == expected and kept)
        counts.update({key: 1, (*key, "provider"): ok[0], (*key, "direct"): ok[1]})
        if not all(ok):
            differing.append(case)
    print(f"seed {seed}, {count} random scatters; agreeing with onnx_gather.core.scatter bit for bit:")
    print(f"{'operator':<16} {'kind':<14} {'cases':>6} {'provider':>9} {'direct':>7}")
    for key in sorted(k for k in counts if len(k) == 2):
        print(
            f"{key[0]:<16} {key[1]:<14} {counts[key]:>6} {counts[(*key, 'provider')]:>9} {counts[(*key, 'direct')]:>7}"
        )
    for case in differing[:show]:
        print(
            f"  differs: {case.op} axis {case.axis} {case.data.dtype} {case.data.shape} "
            f"indices {case.indices.ravel()[:8]}"
        )
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
