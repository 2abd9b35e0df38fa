"""Write onnx_gather/graphs/placement/cpu_kernels.json: the operator versions ONNX Runtime's CPU provider has kernels
for, read from the kernel registry of the ONNX Runtime it runs under.

    python tools/cpu_kernels.py

Run it under the ONNX Runtime release the table is to describe (``pip install onnxruntime==1.24.4`` in a scratch
environment: the CPU provider's registrations are those of ``cpu_execution_provider.cc`` and the contrib ops'
``cpu_contrib_kernels.cc`` as that release built them; the DirectML package builds the same CPU provider). Per
registration: the domain, the operator and the versions it covers (start, end; a kernel registered without an end
version has end null, and ONNX Runtime matches it only to a node of exactly its start version,
``KernelRegistry::VerifyKernelDef``). Typed registrations of one range are one row. ``onnx_gather.graphs.placement``
reads the table to tell where ONNX Runtime expands a node into its ONNX function body: where neither provider has a
kernel for the node's version.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnxruntime
from onnxruntime.capi import _pybind_state

OUT = Path(__file__).resolve().parents[1] / "onnx_gather" / "graphs" / "placement" / "cpu_kernels.json"
OPEN_END = 2**31 - 1  # how the registry reports a kernel registered without an end version


def registrations() -> list[list]:
    """[domain, op, start, end or None] for every CPU kernel of the running ONNX Runtime, sorted."""
    rows = set()
    for kernel in _pybind_state.get_all_opkernel_def():
        if kernel.provider == "CPUExecutionProvider":
            start, end = kernel.version_range
            domain = "" if kernel.domain == "ai.onnx" else kernel.domain
            rows.add((domain, kernel.op_name, start, None if end >= OPEN_END else end))
    return [list(row) for row in sorted(rows, key=lambda r: (r[0], r[1], r[2], r[3] or 0))]


def main() -> None:
    table = {"source": f"onnxruntime {onnxruntime.__version__}", "kernels": registrations()}
    OUT.write_text(json.dumps(table, separators=(",", ":")) + "\n")
    print(f"wrote {OUT}: {len(table['kernels'])} registrations from {table['source']}")


if __name__ == "__main__":
    main()
