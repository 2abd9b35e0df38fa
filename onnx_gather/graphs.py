"""Small ONNX models holding one gather, in DML form or standard form."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from onnx_gather.ops import DOMAIN

# onnxruntime 1.31 reads IR versions up to 13; 10 is what onnx 1.16 and later write for opset 21.
IR_VERSION = 10
ONNX_OPSET = 17


def single_node_model(
    op_type: str, input_dtype: np.dtype, indices_dtype: np.dtype, domain: str = DOMAIN, **attributes: object
) -> onnx.ModelProto:
    """A model ``output = op_type(input, indices, **attributes)`` with shapes left to the feeds.

    For the DML ops (domain ``onnx_gather``) the caller passes every attribute: the bridge has no
    optional attributes.
    """
    to_onnx = helper.np_dtype_to_tensor_dtype
    node = helper.make_node(
        op_type, ["input", "indices"], ["output"], name=op_type.lower(), domain=domain, **attributes
    )
    graph = helper.make_graph(
        [node],
        op_type,
        [
            helper.make_tensor_value_info("input", to_onnx(np.dtype(input_dtype)), None),
            helper.make_tensor_value_info("indices", to_onnx(np.dtype(indices_dtype)), None),
        ],
        [helper.make_tensor_value_info("output", to_onnx(np.dtype(input_dtype)), None)],
    )
    opsets = [helper.make_opsetid("", ONNX_OPSET)]
    if domain == DOMAIN:
        opsets.append(helper.make_opsetid(DOMAIN, 1))
    return helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION)
