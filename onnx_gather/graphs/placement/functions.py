"""Operators ONNX Runtime expands into their ONNX function bodies before placing them.

ONNX Runtime's partitioning (``GraphPartitioner``) inlines a node that no provider claimed and whose operator has an
ONNX function body, and places the body's nodes in turn. A node reaches that point when neither the DirectML
provider nor the CPU provider has a kernel for its exact version: the CPU provider's kernels are in
``cpu_kernels.json``, read from ONNX Runtime 1.24.4's kernel registry by ``tools/cpu_kernels.py``.
"""

from __future__ import annotations

import functools
import json
from importlib import resources

import onnx
from onnx import helper

from onnx_gather.graphs.types import ValueType


@functools.cache
def _cpu_kernels() -> dict[tuple[str, str], list[tuple[int, int | None]]]:
    table = json.loads(resources.files("onnx_gather.graphs.placement").joinpath("cpu_kernels.json").read_text())
    kernels: dict[tuple[str, str], list[tuple[int, int | None]]] = {}
    for domain, op, start, end in table["kernels"]:
        kernels.setdefault((domain, op), []).append((start, end))
    return kernels


def cpu_has_kernel(domain: str, op_type: str, since: int) -> bool:
    """Whether the CPU provider registers a kernel for ``op_type`` of since-version ``since`` (a kernel registered
    without an end version takes exactly its start version, ``KernelRegistry::VerifyKernelDef``)."""
    ranges = _cpu_kernels().get(("" if domain == "ai.onnx" else domain, op_type), [])
    return any(since == start if end is None else start <= since <= end for start, end in ranges)


def body(
    node: onnx.NodeProto, schema: onnx.defs.OpSchema, opset: int, types: dict[str, ValueType]
) -> onnx.ModelProto | None:
    """``node`` expanded: a model of its function body's nodes, its inputs the graph's inputs (typed as
    ``types`` knows them), its outputs the graph's outputs; None where the operator has no body for ``opset``."""
    function = _function(node, schema, opset, types)
    if function is None:
        return None
    renamed = dict(zip(function.input, node.input, strict=False)) | dict(
        zip(function.output, node.output, strict=False)
    )
    prefix = f"{node.name or node.op_type}/"
    nodes = []
    for inner in function.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        copy.name = prefix + (inner.name or f"{inner.op_type}{len(nodes)}")
        copy.input[:] = [renamed.get(n, prefix + n) if n else "" for n in inner.input]
        copy.output[:] = [renamed.get(n, prefix + n) if n else "" for n in inner.output]
        attributes = [_bound(a, node) for a in inner.attribute]
        del copy.attribute[:]
        copy.attribute.extend(a for a in attributes if a is not None)
        nodes.append(copy)
    inputs = [_value(name, types) for name in node.input if name]
    outputs = [_value(name, types) for name in node.output if name]
    graph = helper.make_graph(nodes, f"{node.op_type} body", inputs, outputs)
    imports = {o.domain: o.version for o in function.opset_import} | {"": opset}
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in imports.items()])


def _function(
    node: onnx.NodeProto, schema: onnx.defs.OpSchema, opset: int, types: dict[str, ValueType]
) -> onnx.FunctionProto | None:
    function = onnx.FunctionProto()
    if schema.has_function:
        function.ParseFromString(schema.get_function_with_opset_version(opset))
    elif schema.has_context_dependent_function:
        if any(name and name not in types for name in node.input):
            return None  # its body depends on its input types
        typed = [
            helper.make_tensor_type_proto(types[name].elem_type, None).SerializeToString() if name else b""
            for name in node.input
        ]
        built = schema.get_context_dependent_function_with_opset_version(opset, node.SerializeToString(), typed)
        if not built:
            return None
        function.ParseFromString(built)
    else:
        return None
    return function if function.node else None


def _bound(attribute: onnx.AttributeProto, node: onnx.NodeProto) -> onnx.AttributeProto | None:
    """A body attribute with its reference to the node's attribute resolved (dropped where the node has none)."""
    if not attribute.ref_attr_name:
        return attribute
    given = next((a for a in node.attribute if a.name == attribute.ref_attr_name), None)
    if given is None:
        return None
    bound = onnx.AttributeProto()
    bound.CopyFrom(given)
    bound.name = attribute.name
    return bound


def _value(name: str, types: dict[str, ValueType]) -> onnx.ValueInfoProto:
    known = types.get(name)
    if known is None:
        return helper.make_value_info(name, onnx.TypeProto())
    return helper.make_tensor_value_info(name, known.elem_type, known.dims)
