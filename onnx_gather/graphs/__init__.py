"""ONNX graphs, without running them: loading and validating models, ranks, standard gathers into the DML form
(``convert``) and back (``lower``, ``lower_directml``), and where ONNX Runtime's DirectML provider places each
gather (``placement``, ``provider``, ``check``). Imports ``core`` only; no runtime is loaded at import.
"""
