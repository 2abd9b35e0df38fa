"""Conformance against real DirectML through its two doors: random cases through ONNX Runtime's DirectML provider
(``provider_door``) and through DirectML called directly (``direct_door``, on the operator descs ``random_descs``
draws over the whole domain), compared bit for bit with the semantics, the custom ops and the lowering; and ONNX's
backend node suite on real DirectML against ONNX Runtime's DirectML CI (``node_suite``). Imports
every layer below it; only ``app`` and the tests import it.
"""
