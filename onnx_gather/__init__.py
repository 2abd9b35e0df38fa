"""DirectML's Gather, GatherElements and GatherND semantics for ONNX models, on any machine.

* ``dml_gather``, ``dml_gather_elements`` and ``dml_gather_nd``: the semantics in numpy
  (``onnx_gather.core.semantics``);
* ``DOMAIN``, ``session_options()`` and ``InferenceSession``: the same semantics as the ONNX Runtime
  custom ops ``DmlGather``, ``DmlGatherElements`` and ``DmlGatherNd`` (``onnx_gather.runtime.ops``);
* ``to_dml`` and ``to_onnx``: standard gathers into DML form and back (``onnx_gather.graphs.convert``, ``.lower``;
  ``LoweringError`` where a DML node cannot be lowered);
  ``Observation``: the run that tells ``to_dml`` the ranks no shape inference can (``onnx_gather.runtime.observe``);
* ``emulated``: a model as ONNX Runtime's DirectML provider would run it, in standard ONNX for any ONNX Runtime, with
  the failures DirectML gives (``onnx_gather.graphs.emulate``; the ``dmlsim`` backend, docs/dmlsim.md);
* ``register_schemas()``: the DML ops declared to onnx, whose shape inference and checker then know them
  (``onnx_gather.core.contract``, the one declaration of the ops);
* ``sample_model_path()``: where the bundled sample model is, installed or in a source tree
  (``onnx_gather.graphs.bundled``).

Each name is imported when first used: importing the package, or its runtime-free layers (``core``, ``graphs``,
``directml``; docs/design.md), loads neither onnxruntime nor onnxruntime-extensions.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "DOMAIN": "onnx_gather.core.contract",
    "GatherError": "onnx_gather.core.semantics",
    "InferenceSession": "onnx_gather.runtime.ops",
    "LoweringError": "onnx_gather.graphs.lowering.lower",
    "Observation": "onnx_gather.runtime.observe",
    "dml_gather": "onnx_gather.core.semantics",
    "emulated": "onnx_gather.graphs.emulate",
    "dml_gather_elements": "onnx_gather.core.semantics",
    "dml_gather_nd": "onnx_gather.core.semantics",
    "register_schemas": "onnx_gather.core.contract",
    "sample_model_path": "onnx_gather.graphs.bundled",
    "session_options": "onnx_gather.runtime.ops",
    "to_dml": "onnx_gather.graphs.convert",
    "to_onnx": "onnx_gather.graphs.lowering.lower",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'onnx_gather' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
