"""DirectML's Gather and GatherElements semantics for ONNX models, on any machine.

* ``dml_gather`` and ``dml_gather_elements``: the semantics in numpy (``onnx_gather.semantics``);
* ``DOMAIN``, ``session_options()`` and ``InferenceSession``: the same semantics as the ONNX Runtime
  custom ops ``DmlGather`` and ``DmlGatherElements`` (``onnx_gather.ops``).
"""

from onnx_gather.ops import DOMAIN, InferenceSession, session_options
from onnx_gather.semantics import GatherError, dml_gather, dml_gather_elements

__all__ = ["DOMAIN", "GatherError", "InferenceSession", "dml_gather", "dml_gather_elements", "session_options"]
