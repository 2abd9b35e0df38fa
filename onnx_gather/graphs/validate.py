"""Checks that a model is well formed before any command works on it, so that bad input fails with one line
that names the node, instead of somewhere deep inside a runtime.

1. Every value a node or a graph output uses is defined: a graph input, an initializer, a node's output, or (in
   a subgraph) a value of an enclosing graph, wherever it is listed (ONNX Runtime sorts the nodes); and no node
   depends on its own output (a cycle).
2. Every standard Gather and GatherElements has an axis within the rank of its data, and every GatherND a batch_dims
   below the ranks of its data and indices, where the ranks are known (``core.sizes.standard_refusal``).
3. Every DML node (DmlGather, DmlGatherElements, DmlGatherNd) passes onnx's checker against the ops' schemas
   (``core.contract``: exactly its attributes, of their types; two inputs, one output), with valid values: a mode
   (``core.contract.mode_refusal``), and integers in their ranges where the rank is known
   (``core.sizes.attribute_refusal``).
"""

from __future__ import annotations

import onnx
from onnx import AttributeProto

from onnx_gather.core import contract
from onnx_gather.core.errors import UserError
from onnx_gather.core.sizes import attribute_refusal, standard_refusal
from onnx_gather.graphs.plumbing import Body, bodies, may_hold_graphs, node_label, orders, subgraphs
from onnx_gather.graphs.types import ValueType, value_types


class InvalidModel(UserError):
    """A model that is not well formed; the message names where."""


def _node_name(node: onnx.NodeProto, position: int) -> str:
    return f"node {node_label(node, position)!r} ({node.op_type})"


def _check_definitions(model: onnx.ModelProto) -> None:
    graph = model.graph
    stack: list[tuple[onnx.GraphProto, frozenset[str], str]] = [(graph, frozenset(), f"graph {graph.name!r}")]
    while stack:
        current, outer, where = stack.pop()
        defined = set(outer) | {v.name for v in current.input} | {t.name for t in current.initializer}
        defined.update(name for node in current.node for name in node.output)
        defined.add("")  # an optional input left out
        for position, node in enumerate(current.node):
            for name in node.input:
                if name not in defined:
                    raise InvalidModel(f"{where}: {_node_name(node, position)} uses {name!r}, which nothing defines")
            for attribute_name, subgraph in subgraphs(node):
                if not may_hold_graphs(node):
                    raise InvalidModel(
                        f"{where}: {_node_name(node, position)}: attribute {attribute_name!r} holds "
                        f"a graph, which {node.op_type} does not take"
                    )
                stack.append(
                    (subgraph, frozenset(defined), f"subgraph {attribute_name!r} of {_node_name(node, position)}")
                )
        for value in current.output:
            if value.name not in defined:
                raise InvalidModel(f"{where}: output {value.name!r} is not produced by anything")
    for function in model.functions:
        defined = set(function.input) | {""} | {name for node in function.node for name in node.output}
        for position, node in enumerate(function.node):
            missing = [name for name in node.input if name not in defined]
            if missing:
                where = f"function '{function.domain}.{function.name}'"
                raise InvalidModel(f"{where}: {_node_name(node, position)} uses {missing[0]!r}, which nothing defines")


def _check_cycles(model: onnx.ModelProto) -> None:
    for order in orders(model):
        if order.cyclic:
            nodes = order.body.nodes
            cycle = order.cycle()
            names = " -> ".join(_node_name(nodes[p], p) for p in (*cycle, cycle[0]))
            raise InvalidModel(
                f"{order.body.where}: {_node_name(nodes[cycle[0]], cycle[0])} depends on its own output: {names}"
            )


def _check_gather(node: onnx.NodeProto, data: ValueType | None) -> str | None:
    axis_attribute = next((a for a in node.attribute if a.name == "axis"), None)
    if axis_attribute is None:
        return None
    if axis_attribute.type != AttributeProto.INT:
        return f"attribute 'axis' must be an integer, not {AttributeProto.AttributeType.Name(axis_attribute.type)}"
    refused = standard_refusal(node.op_type, data.rank if data is not None else None, None, axis_attribute.i)
    return f"{refused.reason} (input {node.input[0]!r})" if refused is not None else None


def _check_gather_nd(node: onnx.NodeProto, data: ValueType | None, indices: ValueType | None) -> str | None:
    batch = next((a for a in node.attribute if a.name == "batch_dims"), None)
    if batch is None:
        return None
    if batch.type != AttributeProto.INT:
        return f"attribute 'batch_dims' must be an integer, not {AttributeProto.AttributeType.Name(batch.type)}"
    ranks = [value.rank if value is not None else None for value in (data, indices)]
    refused = standard_refusal("GatherND", *ranks, batch_dims=batch.i)
    return refused.reason if refused is not None else None


def _checker(model: onnx.ModelProto, body: Body) -> onnx.checker.C.CheckerContext:
    """onnx's checker for the DML nodes of ``body``, with their schemas declared (``core.contract``)."""
    contract.register_schemas()
    context = onnx.checker.C.CheckerContext()
    context.ir_version = model.ir_version or onnx.IR_VERSION
    imports = body.container.opset_import if isinstance(body.container, onnx.FunctionProto) else model.opset_import
    context.opset_imports = {o.domain: o.version for o in imports}
    return context


def _check_dml(node: onnx.NodeProto, data: ValueType | None, checker: onnx.checker.C.CheckerContext) -> str | None:
    try:  # the attributes' presence and types, the inputs' count, the domain's import: onnx's checker
        onnx.checker.check_node(node, checker, onnx.checker.C.LexicalScopeContext())
    except onnx.checker.ValidationError as error:
        return str(error).split("\n")[0].strip()
    mode = next(a.s for a in node.attribute if a.name == "out_of_bounds").decode(errors="replace")
    refusal = contract.mode_refusal(mode)
    if refusal is not None:
        return refusal
    if data is None or data.rank is None:
        return None
    refused = attribute_refusal({a.name: a.i for a in node.attribute if a.type == AttributeProto.INT}, data.rank)
    return f"{refused.reason} (input {node.input[0]!r})" if refused is not None else None


def validate(model: onnx.ModelProto) -> None:
    """Raise InvalidModel, naming the node, if ``model`` is not well formed (see the module's rules)."""
    _check_definitions(model)
    _check_cycles(model)
    types = value_types(model)
    for body in bodies(model):
        checker = None  # made for the first DML node of the body
        scope = types.get(body.scope, {})
        for position, node in enumerate(body.nodes):
            data = scope.get(node.input[0]) if node.input else None
            problem = None
            if node.domain in ("", "ai.onnx") and node.op_type in ("Gather", "GatherElements"):
                problem = _check_gather(node, data)
            elif node.domain in ("", "ai.onnx") and node.op_type == "GatherND":
                problem = _check_gather_nd(node, data, scope.get(node.input[1]) if len(node.input) > 1 else None)
            elif contract.is_dml(node):
                checker = checker or _checker(model, body)
                problem = _check_dml(node, data, checker)
            if problem:
                raise InvalidModel(f"{body.where}: {_node_name(node, position)}: {problem}")
