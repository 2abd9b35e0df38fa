"""Conformance against real DirectML: random cases through ONNX Runtime's DirectML provider (``provider``) and
through DirectML called directly (``direct``), compared bit for bit with the semantics, the custom ops and the
lowering. Imports every layer below it; only ``app`` and the tests import it.
"""
