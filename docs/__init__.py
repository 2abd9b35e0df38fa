"""onnx-gather's documentation, installed with the package as ``onnx_gather.docs``: ``onnx-gather docs`` prints it."""
