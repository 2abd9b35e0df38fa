"""The lowest layer: what DirectML computes, in numpy, with no runtime; its only ONNX is ``contract``'s operator
schemas, which declare the DML ops to onnx (no graph is built here).

* ``contract``: the one declaration of the DML ops (names, attributes, modes, element types, carriers);
* ``semantics``: DirectML's Gather, GatherElements and GatherND on numpy arrays;
* ``descs`` and ``predict``: DirectML's operator descs over buffers, and what DirectML computes for any of them;
* ``examples``: DirectML's documented examples; ``errors``: the error classes every layer raises.
"""
