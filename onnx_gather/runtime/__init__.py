"""Running models: the DML ops as ONNX Runtime custom operators (``ops``, ``kernels``) and in onnx's reference
evaluator (``evaluator``), the backends a model can run on (``backends``), inputs, and the comparison of their
outputs (``parity``, ``divergence``). Imports ``core``, ``graphs`` and ``directml``.
"""
