"""The sample models (installed as ``onnx_gather.models``); tools/make_models.py regenerates them."""
