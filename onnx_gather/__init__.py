"""DirectML's Gather, GatherElements and GatherND semantics for ONNX models, on any machine.

* ``dml_gather``, ``dml_gather_elements`` and ``dml_gather_nd``: the semantics in numpy (``onnx_gather.semantics``);
* ``DOMAIN``, ``session_options()`` and ``InferenceSession``: the same semantics as the ONNX Runtime
  custom ops ``DmlGather``, ``DmlGatherElements`` and ``DmlGatherNd`` (``onnx_gather.ops``);
* ``to_dml`` and ``to_onnx``: standard gathers into DML form and back (``onnx_gather.convert``, ``.lower``);
  ``Observation``: the inputs of the run that tells ``to_dml`` the ranks shape inference cannot (``.ranks``).

Each name is imported when first used: importing the package, or its runtime-free core (semantics, predict, descs,
convert, lower, placement, provider, check), loads neither onnxruntime nor onnxruntime-extensions.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "DOMAIN": "onnx_gather.graph",
    "GatherError": "onnx_gather.semantics",
    "InferenceSession": "onnx_gather.ops",
    "Observation": "onnx_gather.ranks",
    "dml_gather": "onnx_gather.semantics",
    "dml_gather_elements": "onnx_gather.semantics",
    "dml_gather_nd": "onnx_gather.semantics",
    "session_options": "onnx_gather.ops",
    "to_dml": "onnx_gather.convert",
    "to_onnx": "onnx_gather.lower",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'onnx_gather' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
