"""DirectML's Gather and GatherElements semantics for ONNX models, on any machine.

* ``dml_gather``, ``dml_gather_elements`` and ``dml_gather_nd``: the semantics in numpy (``onnx_gather.semantics``);
* ``DOMAIN``, ``session_options()`` and ``InferenceSession``: the same semantics as the ONNX Runtime
  custom ops ``DmlGather``, ``DmlGatherElements`` and ``DmlGatherNd`` (``onnx_gather.ops``);
* ``to_dml`` and ``to_onnx``: standard gathers into DML form and back (``onnx_gather.convert``, ``.lower``);
  ``Observation``: the inputs of the run that tells ``to_dml`` the ranks shape inference cannot (``.ranks``).
"""

from onnx_gather.convert import to_dml
from onnx_gather.lower import to_onnx
from onnx_gather.ops import DOMAIN, InferenceSession, session_options
from onnx_gather.ranks import Observation
from onnx_gather.semantics import GatherError, dml_gather, dml_gather_elements, dml_gather_nd

__all__ = [
    "DOMAIN",
    "GatherError",
    "InferenceSession",
    "Observation",
    "dml_gather",
    "dml_gather_elements",
    "dml_gather_nd",
    "session_options",
    "to_dml",
    "to_onnx",
]
