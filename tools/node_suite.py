"""Run ONNX's backend node test cases (those of the installed onnx) on real DirectML, and compare with ONNX Runtime's
DirectML CI; or, with --dmlsim, on real DirectML and the dmlsim backend, and compare the two.

python tools/node_suite.py [--dmlsim] [--results FILE] [--select REGEX] [--summary]

Appends one JSON line per case to FILE (default node-suite.jsonl, with --dmlsim dmlsim-suite.jsonl) and prints one
line per case: its verdict as onnx stamps it (pass, fail, or not run: a stamp ONNX Runtime 1.24.4 refuses, a value
that is no tensor; with --dmlsim, agree, disagree or not run), the nodes ONNX Runtime placed on DirectML and on its
CPU provider, the symptom, and the same re-stamped where that applies. Run again, it skips the cases FILE already
holds. Then prints the counts and the comparison with the CI's expectations (with --dmlsim, the cases where dmlsim
and real DirectML disagree) (--summary: only that, from FILE). Needs `onnx-gather setup-directml`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from onnx_gather.conformance import dmlsim_suite, node_suite


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dmlsim", action="store_true", help="run each case on dmlsim too, and compare the two")
    parser.add_argument("--results", type=Path, help="the results file (node-suite.jsonl, dmlsim-suite.jsonl)")
    parser.add_argument("--select", help="only the cases whose name this regular expression finds")
    parser.add_argument("--summary", action="store_true", help="print the summary of FILE, run nothing")
    args = parser.parse_args()
    path = args.results or Path("dmlsim-suite.jsonl" if args.dmlsim else "node-suite.jsonl")
    if args.summary:
        results = node_suite.read_results(path)
    else:
        run = dmlsim_suite.run_suite if args.dmlsim else node_suite.run_suite
        results = run(path, args.select, lambda line: print(node_suite.describe(line), flush=True))
    if args.dmlsim:
        print(dmlsim_suite.suite_summary(results))
    else:
        print(node_suite.suite_summary(results, node_suite.Expectations.bundled()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
