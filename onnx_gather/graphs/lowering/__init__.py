"""DML form back to standard ONNX (``to_onnx``): the rules and the driver (``lower``), what ``to_dml`` put around a
DML node that can be taken away (``through``), native indices for the out-of-bounds modes error, clamp and zero
(``native``), and for ``directml`` what real DirectML reads (``directml_reading``), built from DirectML's memory
expressed in ONNX nodes (``dml_memory``); the scatters, on the flattened output (``flat_scatter``).
"""
