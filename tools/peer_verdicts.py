"""Measure real DirectML's verdict on every peer case of tests/peers/cases.json, each case alone in its own session
(two runners side by side), and write the verdicts into the file (the ``directml`` entries; nothing else changes).

python tools/peer_verdicts.py [--unmeasured]

``--unmeasured``: only the cases without a verdict (new cases, or ones whose verdict was dropped to be measured again).

Prints the count per source and verdict, the time, and every case whose verdict differs from the peer's expectation
otherwise than its ``difference`` says (exit 1 if any): tests/test_peers.py fails on those until the difference and
its reason are written in. Needs `onnx-gather setup-directml`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import peers
from peers import directml


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--unmeasured", action="store_true", help="only the cases without a verdict")
    unmeasured = parser.parse_args().unmeasured
    doc = peers.document()
    chosen = [
        (spec, case)
        for spec, case in zip(doc["cases"], peers.load(), strict=True)
        if not (unmeasured and case.directml)
    ]
    start = time.perf_counter()
    counts: Counter = Counter()
    with tempfile.TemporaryDirectory(prefix="onnx-gather-peers-") as folder:
        runs = directml.alone([case for _, case in chosen], Path(folder))
    for (spec, _), run in zip(chosen, runs, strict=True):
        spec["directml"] = run.verdict()
        counts[run.cases[0].source, peers.verdict_kind(spec["directml"])] += 1
    print(f"{len(chosen)} cases, each in its own session: {time.perf_counter() - start:.1f} s")
    for (source, verdict), count in sorted(counts.items()):
        print(f"  {source}: {verdict}: {count}")
    peers.save(doc)
    unexplained = 0
    for case in peers.load():
        found, recorded = peers.difference(case), (case.difference or {}).get("kind")
        if found != recorded:
            print(f"{case.name}: differs from the peer: {found}; recorded: {recorded}")
            unexplained += 1
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
