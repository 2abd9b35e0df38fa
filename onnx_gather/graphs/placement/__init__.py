"""Where ONNX Runtime's DirectML provider runs things, worked out without running them: what DirectML accepts at
each feature level and where one standard gather goes (``gather``, ``place_gather``), where every node of a model
goes (``nodes``, ``place_nodes``, from the provider's kernel table ``dml_kernels.json``), and ``onnx-gather check``
built on both (``check``).
"""
