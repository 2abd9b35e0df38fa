"""The lowering's workarounds for ONNX Runtime, each pinned: the values that made the plain construct fail, through
the lowered graph in ONNX Runtime, against the semantics, bit for bit. Where the construct fails in the installed
ONNX Runtime too, a test says so (it fails once a release fixes it: then the workaround can go)."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from conftest import assert_identical, run_model
from onnx import TensorProto
from onnx import helper as h

import onnx_gather
from onnx_gather.core import semantics


def _lowered(op_type: str, data_type: int, data_dims: list, indices_type: int, indices_dims: list, **attributes):
    graph = h.make_graph(
        [h.make_node(op_type, ["data", "indices"], ["out"], name="the_gather", **attributes)],
        "g",
        [
            h.make_tensor_value_info("data", data_type, data_dims),
            h.make_tensor_value_info("indices", indices_type, indices_dims),
        ],
        [h.make_tensor_value_info("out", data_type, None)],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10)


def _through_lowering(model, mode: str, feeds: dict) -> np.ndarray:
    lowered = onnx_gather.to_onnx(onnx_gather.to_dml(model, out_of_bounds=mode))
    assert not any(node.domain == "onnx_gather" for node in lowered.graph.node)
    return run_model(lowered, feeds)[0]


BEYOND_INT32 = np.array([2**32 - 8, -(2**32) - 3, 5, -6, 2**40], np.int64)  # size 6: the INT64 Min/Max/Clip cases


@pytest.mark.parametrize("mode", ["clamp", "zero", "directml"])
def test_int64_indices_beyond_int32_are_clamped_exactly(mode):
    # lowering.native.fix_indices clamps INT64 indices through DOUBLE (ONNX Runtime 1.31's INT64 Clip left
    # Clip(2^32 - 8, -6, 5) at 2^32 - 8); lowering.dml_memory.minimum uses Less and Where (its INT64 Min gave 4294967288
    # for Min(4294967288, 255)). Both values read past the int32 range here.
    data = np.arange(6, dtype=np.float32) + 10
    model = _lowered("GatherElements", TensorProto.FLOAT, [6], TensorProto.INT64, [5], axis=0)
    expected = semantics.dml_gather_elements(data, BEYOND_INT32, 0, mode)
    assert_identical(_through_lowering(model, mode, {"data": data, "indices": BEYOND_INT32}), expected)


@pytest.mark.parametrize("mode", ["clamp", "zero"])
def test_gather_nd_tuples_beyond_int32_and_no_tuples(mode):
    # lowering.native.fix_tuples: Min and Max through DOUBLE (ONNX Runtime 1.31's INT64 Min and Max were wrong beyond
    # the int32 range), and an Or over the coordinates where a ReduceMax over no tuples had the wrong shape.
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    model = _lowered("GatherND", TensorProto.FLOAT, [3, 4], TensorProto.INT64, ["n", 2])
    for tuples in (np.array([[2**32 - 8, 1], [-(2**32), -1], [1, 2]], np.int64), np.zeros((0, 2), np.int64)):
        expected = semantics.dml_gather_nd(data, tuples, 2, 2, 0, mode)  # with DML's leading 1 on the output
        actual = _through_lowering(model, mode, {"data": data, "indices": tuples})
        assert actual.shape == tuples.shape[:-1] + data.shape[2:]
        assert_identical(actual, expected.reshape(actual.shape))


def test_bfloat16_element_counts_do_not_use_size():
    # lowering.dml_memory.Tensor.count multiplies the dims: ONNX Runtime has no Size kernel for BFLOAT16.
    graph = h.make_graph(
        [h.make_node("Size", ["a"], ["n"])],
        "g",
        [h.make_tensor_value_info("a", TensorProto.BFLOAT16, [2])],
        [h.make_tensor_value_info("n", TensorProto.INT64, None)],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=10)
    with pytest.raises(onnxruntime.capi.onnxruntime_pybind11_state.NotImplemented, match="Size"):
        onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    bits = np.array([0x3F80, 0x7FC1, 0xC000, 0x0001, 0x4040], np.uint16)  # 1, a NaN with a payload, -2, tiny, 3
    model = _lowered("Gather", TensorProto.BFLOAT16, ["n"], TensorProto.INT64, [4], axis=0)
    indices = np.array([4, 5, -6, 2**32 + 1], np.int64)
    data = bits.view(np.float16)  # the same 16 bits: DirectML's reading moves them as they are
    expected = semantics.dml_gather(data, indices, 0, 1, "directml")
    lowered = onnx_gather.to_onnx(onnx_gather.to_dml(model, out_of_bounds="directml"))
    # Read back as FLOAT (a widening Cast moves the 16 bits into the high half, exactly): numpy has no BFLOAT16.
    lowered.graph.node.append(h.make_node("Cast", ["out"], ["out_float"], to=TensorProto.FLOAT))
    lowered.graph.output.append(h.make_tensor_value_info("out_float", TensorProto.FLOAT, None))
    session = onnxruntime.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"])
    value = onnxruntime.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, TensorProto.BFLOAT16)
    out = session.run(["out_float"], {"data": value, "indices": indices})[0]
    assert (out.view(np.uint32) >> 16).tolist() == expected.view(np.uint16).tolist()
