"""Each DML node says which nodes to_dml wrote around it, and lowering takes away those and no others; a DML node
that does not say (converted before it did, or made by hand) is lowered as before, by recognising them."""

from __future__ import annotations

import json

import numpy as np
import onnx
from conftest import assert_all_identical, run_model
from onnx import TensorProto as T
from onnx import helper as h

import onnx_gather
from onnx_gather.core.contract import DOMAIN
from onnx_gather.graphs.dml_plan import WROTE
from onnx_gather.graphs.plumbing import bodies


def _model(nodes, inputs, outputs):
    graph = h.make_graph(nodes, "test", inputs, outputs)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def _wrote(model):
    """Per DML node, its WROTE entry as read back (None where it has none)."""
    entries = {
        n.name: {e.key: e.value for e in n.metadata_props} for b in bodies(model) for n in b.nodes if n.domain == DOMAIN
    }
    return {name: json.loads(entry[WROTE]) if WROTE in entry else None for name, entry in entries.items()}


def _tagged(model, value):
    """``model`` with every DML node's WROTE entry replaced by ``value`` (None: taken away, as before tags)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for body in bodies(copy):
        for node in body.nodes:
            if node.domain == DOMAIN:
                del node.metadata_props[:]
                if value is not None:
                    node.metadata_props.add(key=WROTE, value=value)
    return copy


def _nodes(model):
    return [(n.name, n.op_type, list(n.input), list(n.output)) for n in model.graph.node]


def test_each_dml_node_names_the_nodes_to_dml_wrote_around_it_by_role():
    model = _model(
        [
            h.make_node("GatherElements", ["x", "j"], ["z"], name="ge", axis=0),
            h.make_node("GatherElements", ["w", "k"], ["v"], name="plain", axis=0),
        ],
        [
            h.make_tensor_value_info("x", T.FLOAT16, [3, 4]),
            h.make_tensor_value_info("j", T.INT64, [1, 2]),
            h.make_tensor_value_info("w", T.FLOAT, [3, 4]),
            h.make_tensor_value_info("k", T.INT64, [2, 4]),
        ],
        [h.make_tensor_value_info("z", T.FLOAT16, [1, 2]), h.make_tensor_value_info("v", T.FLOAT, [2, 4])],
    )
    converted = onnx_gather.to_dml(model, 4, out_of_bounds="error", provider_failures="onnx")
    wrote = _wrote(converted)
    by_name = {n.name: n.op_type for n in converted.graph.node}
    roles = {role: by_name[name] for role, name in wrote["ge"].items()}
    assert roles == {
        "slice_input": "Slice",
        "carry_input": "Cast",
        "pad_input": "Unsqueeze",
        "pad_indices": "Unsqueeze",
        "unpad_output": "Squeeze",
        "carry_output": "Cast",
    }
    assert wrote["plain"] == {
        "pad_input": "plain/pad_input_1",
        "pad_indices": "plain/pad_indices_1",
        "unpad_output": "plain/unpad_output",
    }
    auto = _wrote(onnx_gather.to_dml(model, provider_failures="onnx"))  # N=2: nothing to pad, "plain" wrote nothing
    assert auto == {
        "ge": {"slice_input": "ge/slice_input_1", "carry_input": "ge/carry_input_1", "carry_output": "ge/carry_output"},
        "plain": {},
    }
    x, k = np.arange(12).reshape(3, 4), np.array([[2, 0, 1, 1], [0, 0, 2, 1]])
    feeds = {"x": x.astype(np.float16), "j": np.array([[2, 0]]), "w": x.astype(np.float32), "k": k}
    assert_all_identical(run_model(converted, feeds, custom_ops=True), run_model(model, feeds))  # ORT takes the entry
    lowered = onnx_gather.to_onnx(converted)
    assert _nodes(lowered) == _nodes(model)  # what it named was taken away, nothing else
    assert _nodes(onnx_gather.to_onnx(_tagged(converted, None))) == _nodes(model)  # without the entries, recognised


def test_a_models_own_unsqueeze_before_a_gather_is_kept_and_without_the_entry_taken_for_padding():
    model = _model(
        [
            h.make_node("Unsqueeze", ["x", "zero"], ["x3"], name="mine"),
            h.make_node("Gather", ["x3", "i"], ["y"], name="g", axis=2),
        ],
        [h.make_tensor_value_info("x", T.FLOAT, [3, 4]), h.make_tensor_value_info("i", T.INT64, [2])],
        [h.make_tensor_value_info("y", T.FLOAT, [1, 3, 2])],
    )
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array([0], np.int64), "zero"))
    converted = onnx_gather.to_dml(model, out_of_bounds="error")
    assert _wrote(converted) == {"g": {"pad_indices": "g/pad_indices_1"}}  # the data needed no leading ones
    assert _nodes(onnx_gather.to_onnx(converted)) == _nodes(model)
    feeds = {"x": np.arange(12, dtype=np.float32).reshape(3, 4), "i": np.array([3, 1])}
    # An entry that is not a JSON object names nothing: every node around the DML node is kept, 'mine' first.
    unread = onnx_gather.to_onnx(_tagged(converted, "not json"))
    assert _nodes(unread)[0] == _nodes(model)[0] and len(unread.graph.node) == 5
    # A DML model made by hand, or converted before the entry: 'mine' is taken for to_dml's padding, as before.
    recognised = onnx_gather.to_onnx(_tagged(converted, None))
    assert [n.op_type for n in recognised.graph.node] == ["Gather", "Unsqueeze"]
    for lowered in (unread, recognised):
        assert_all_identical(run_model(lowered, feeds), run_model(model, feeds))
