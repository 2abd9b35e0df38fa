"""Write ONNX Runtime's typed GatherElements tests (``GatherElementsOpTest.{int8_t, ..., MLFloat16}``, 231 cases,
``tests/peers/typed.py``: the test's shapes, types, data and reference output, a fixed ``std::rand()`` for its
indices) into tests/peers/cases.json, before the file's other ``RunTestWrapper`` cases.

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
    new = typed.specs()
    names = {spec["name"] for spec in new}
    old = {spec["name"]: spec for spec in doc["cases"] if spec["name"] in names}
    kept = 0
    for spec in new:
        before = old.get(spec["name"], {})
        if {k: v for k, v in before.items() if k not in MEASURED} == spec:
            spec.update({k: before[k] for k in MEASURED if k in before})
            kept += "directml" in before
    others = [spec for spec in doc["cases"] if spec["name"] not in names]
    first = next(
        k
        for k, spec in enumerate(others)
        if spec["name"].startswith(f"{typed.SOURCE}:") and "RunTestWrapper" in spec["name"]
    )
    doc["cases"] = others[:first] + new + others[first:]
    peers.save(doc)
    print(f"{len(new)} typed cases written ({kept} with their verdicts kept, {len(new) - kept} to measure)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
