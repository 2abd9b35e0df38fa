"""Write ONNX Runtime's typed GatherElements and Scatter tests (``GatherElementsOpTest.{int8_t, ..., MLFloat16}``, 231
cases, and ``Scatter.{int8_t, ..., MLFloat16}``, 418; ``tests/peers/typed.py``: the tests' shapes, types, data and
reference outputs, a fixed ``std::rand()`` for their indices) into tests/peers/cases.json: the gathers before the
file's other ``RunTestWrapper`` cases, the scatters before their file's other cases (as their tests come first).

python tools/peer_typed_cases.py

A case already in the file keeps its ``directml`` verdict and ``difference`` where nothing else of it changed; the
others have none until ``python tools/peer_verdicts.py`` measures them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import peers
from peers import typed

MEASURED = ("directml", "difference")


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    doc = peers.document()
    kept = written = 0
    for source, new, anchor in (
        (typed.SOURCE, typed.specs(), "RunTestWrapper"),
        (typed.SCATTER_SOURCE, typed.scatter_specs(), ""),
    ):
        names = {spec["name"] for spec in new}
        old = {spec["name"]: spec for spec in doc["cases"] if spec["name"] in names}
        for spec in new:
            before = old.get(spec["name"], {})
            if {k: v for k, v in before.items() if k not in MEASURED} == spec:
                spec.update({k: before[k] for k in MEASURED if k in before})
                kept += "directml" in before
        others = [spec for spec in doc["cases"] if spec["name"] not in names]
        first = next(
            (k for k, spec in enumerate(others) if spec["name"].startswith(f"{source}:") and anchor in spec["name"]),
            len(others),
        )
        doc["cases"] = others[:first] + new + others[first:]
        written += len(new)
    peers.save(doc)
    print(f"{written} typed cases written ({kept} with their verdicts kept, {written - kept} to measure)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
