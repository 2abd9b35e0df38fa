"""Which of several writes to one element DirectML keeps: a race (docs/semantics.md section 10).

python tools/scatter_race.py [--runs N]

For each count n of updates (values 1..n) written onto one element by DML_SCATTER and DML_SCATTER_ND, called
directly, prints the value that stayed, in each of N fresh direct.exe processes. Needs `onnx-gather setup-directml`.
"""

from __future__ import annotations

import argparse

import numpy as np

from onnx_gather.conformance import scatters
from onnx_gather.directml.direct import DirectRunner

COUNTS = (64, 1000, 65536, 1 << 20)


def _cases() -> list[scatters.ScatterCase]:
    cases = []
    for n in COUNTS:
        values = np.arange(1, n + 1, dtype=np.float32)
        zeros = np.zeros(n, np.int64)
        cases.append(scatters.ScatterCase("ScatterElements", np.zeros(n, np.float32), zeros, values))
        cases.append(scatters.ScatterCase("ScatterND", np.zeros(4, np.float32), zeros.reshape(-1, 1), values))
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    cases = _cases()
    kept = []
    for _ in range(runs):
        with DirectRunner() as runner:
            outcomes = runner.run([scatters.direct_case(c, "own buffer", 0) for c in cases])
        kept.append([int(np.frombuffer(o.output or b"", np.float32)[0]) for o in outcomes])
    print(f"{'operator':<16} {'updates':>8}  value kept in each of {runs} processes (the last written: the count)")
    for k, case in enumerate(cases):
        print(f"{case.op:<16} {case.updates.size:>8}  {', '.join(str(run[k]) for run in kept)}")


if __name__ == "__main__":
    main()
