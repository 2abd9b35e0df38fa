"""The one declaration of the DML ops (onnx_gather.core.contract): onnx's shape inference and checker know the ops
through their schemas, and the layers that take the ops read the declaration."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as h

import onnx_gather
from onnx_gather.core import contract, semantics
from onnx_gather.graphs.lowering.lower import lower
from onnx_gather.graphs.validate import InvalidModel, validate
from onnx_gather.runtime import ops


def _dml_model(op_type: str, input: list, indices: list, domain: str = contract.DOMAIN, **attributes: object):
    node = h.make_node(op_type, ["input", "indices"], ["output"], domain=domain, name="the_node", **attributes)
    graph = h.make_graph(
        [node],
        "g",
        [
            h.make_tensor_value_info("input", TensorProto.FLOAT, input),
            h.make_tensor_value_info("indices", TensorProto.INT64, indices),
        ],
        [onnx.ValueInfoProto(name="output")],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid(contract.DOMAIN, 1)])


def _inferred(model: onnx.ModelProto) -> str:
    contract.register_schemas()
    return h.printable_type(onnx.shape_inference.infer_shapes(model, strict_mode=True).graph.output[0].type)


@pytest.mark.parametrize(
    ("op_type", "input", "indices", "attributes", "expected"),
    [
        ("DmlGather", [1, "b", 5], [1, 7, 2], {"axis": 1, "index_dimensions": 2}, "FLOAT, 7x2x5"),
        ("DmlGather", [2, 3], [1, 4], {"axis": 0, "index_dimensions": 1}, "FLOAT, 4x3"),
        ("DmlGather", ["n", 3], [1, 4], {"axis": 1, "index_dimensions": 0}, "FLOAT, 1xn"),
        ("DmlGatherElements", ["a", 3], ["a", 9], {"axis": 1}, "FLOAT, ax9"),
        (
            "DmlGatherNd",
            ["b", 4, 5],
            ["b", 7, 1],
            {"input_dimension_count": 3, "indices_dimension_count": 3, "batch_dimension_count": 1},
            "FLOAT, bx7x5",
        ),
        (
            "DmlGatherNd",
            [1, 4, 5],
            [1, 6, 2],
            {"input_dimension_count": 2, "indices_dimension_count": 2, "batch_dimension_count": 0},
            "FLOAT, 1x1x6",
        ),
        (
            "DmlGatherNd",
            [4, 5],
            [6, "k"],
            {"input_dimension_count": 2, "indices_dimension_count": 2, "batch_dimension_count": 0},
            "FLOAT",
        ),
        (
            "DmlGatherNd",
            [4, 5],
            [6, -1],  # a dynamic tuple length, as paddle2onnx writes one
            {"input_dimension_count": 2, "indices_dimension_count": 2, "batch_dimension_count": 0},
            "FLOAT",
        ),
    ],
)
def test_onnx_shape_inference_types_dml_nodes(op_type, input, indices, attributes, expected):
    assert _inferred(_dml_model(op_type, input, indices, out_of_bounds="directml", **attributes)) == expected


@pytest.mark.parametrize("seed", range(4))
def test_inferred_sizes_are_the_semantics_sizes(seed):
    """On random valid static shapes the schemas' sizes are those of the semantics' output."""
    rng = np.random.default_rng(seed)
    checked = 0
    for _ in range(200):
        n = int(rng.integers(1, 5))
        input, indices = [int(s) for s in rng.integers(1, 4, n)], [int(s) for s in rng.integers(1, 4, n)]
        axis, index_dimensions = int(rng.integers(n)), int(rng.integers(n + 1))
        indices[: n - index_dimensions] = [1] * (n - index_dimensions)
        try:
            expected = semantics.gather_output_sizes(input, indices, axis, index_dimensions)
        except semantics.GatherError:
            continue
        model = _dml_model(
            "DmlGather", input, indices, axis=axis, index_dimensions=index_dimensions, out_of_bounds="clamp"
        )
        assert _inferred(model) == "FLOAT, " + "x".join(map(str, expected))
        checked += 1
    assert checked > 50


def test_a_converted_model_is_typed_by_onnx_alone():
    """After to_dml, onnx's own shape inference gives every DML output the type ONNX Runtime computes."""
    dml = onnx_gather.to_dml(_dml_model("GatherND", ["b", 4, 5], ["b", 7, 1], domain="", batch_dims=1))
    del dml.graph.value_info[:]
    for output in dml.graph.output:
        output.type.tensor_type.ClearField("shape")
    inferred = onnx.shape_inference.infer_shapes(dml, strict_mode=True)
    onnx.checker.check_model(inferred, full_check=True)
    typed = {v.name: v.type for v in (*inferred.graph.value_info, *inferred.graph.output)}
    for node in dml.graph.node:
        if contract.is_dml(node):
            assert typed[node.output[0]].tensor_type.elem_type == TensorProto.FLOAT
            assert typed[node.output[0]].tensor_type.HasField("shape")


def test_the_checker_refuses_what_the_declaration_does_not_take():
    model = _dml_model("DmlGather", [2, 3], [1, 4], axis=0, index_dimensions=1, out_of_bounds="clamp")
    model.graph.output[0].CopyFrom(h.make_tensor_value_info("output", TensorProto.FLOAT, [4, 3]))
    contract.register_schemas()
    onnx.checker.check_model(model)
    model.graph.node[0].attribute[0].CopyFrom(h.make_attribute("axis", "zero"))
    with pytest.raises(onnx.checker.ValidationError, match="axis"):
        onnx.checker.check_model(model)
    with pytest.raises(InvalidModel, match=r"node 'the_node' \(DmlGather\): Mismatched attribute type .*axis"):
        validate(model)


_WRAP = "out_of_bounds 'wrap' is unknown (expected one of: directml, clamp, zero, error)"


@pytest.mark.parametrize(
    ("op_type", "attributes", "reason", "where"),
    [
        (
            "DmlGather",
            {"axis": 2, "index_dimensions": 1},
            "axis 2 is out of range [0, 2) for 2-dimensional tensors",
            " (input 'input')",
        ),
        (
            "DmlGatherNd",
            {"input_dimension_count": 3, "indices_dimension_count": 1, "batch_dimension_count": 0},
            "input_dimension_count 3 is out of range [1, 2]",
            " (input 'input')",
        ),
        ("DmlGatherElements", {"axis": 0, "out_of_bounds": "wrap"}, _WRAP, ""),
    ],
)
def test_the_validation_and_the_lowering_word_the_ranges_core_states(op_type, attributes, reason, where):
    """validate and the lowering refuse a DML node's attributes in core's words (core.sizes, core.contract)."""
    model = _dml_model(op_type, [2, 3], [1, 1], **{"out_of_bounds": "clamp", **attributes})
    with pytest.raises(InvalidModel) as refused:
        validate(model)
    assert str(refused.value) == f"graph 'g': node 'the_node' ({op_type}): {reason}{where}"
    _, report = lower(model)
    (left,) = report.left
    assert left.reason.startswith("its attributes are invalid for rank 2") and left.reason.endswith(f": {reason}")


def test_every_layer_takes_the_declared_ops():
    """The custom ops, the validator's schemas and the converter's mapping are the declaration's."""
    assert {o.op_type for o in ops._BASE_OPERATORS} == set(contract.DML_OP_TYPES)
    for operator in ops._BASE_OPERATORS:
        assert set(operator.attributes) == set(contract.BY_TYPE[operator.op_type].attribute_types())
    contract.register_schemas()
    for op in contract.OPS:
        schema = onnx.defs.get_schema(op.op_type, contract.DOMAIN_VERSION, contract.DOMAIN)
        assert set(schema.attributes) == set(op.attribute_types())
        attributes = {} if op.standard == "GatherND" else {"axis": 0}
        model = _dml_model(op.standard, [3, 4], [3, 1], domain="", **attributes)
        converted = onnx_gather.to_dml(model, provider_failures="onnx")
        assert [n.op_type for n in converted.graph.node if contract.is_dml(n)] == [op.op_type]
