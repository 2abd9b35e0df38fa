"""ONNX graphs, without running them: loading and validating models, ranks, standard gathers into the DML form
(``convert``) and back (the ``lowering`` subpackage), and where ONNX Runtime's DirectML provider places each gather
and node (the ``placement`` subpackage). Imports ``core`` only; no runtime is loaded at import.
"""
