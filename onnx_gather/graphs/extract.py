"""A window of a model's main graph as a model of its own, for ``onnx-gather reduce``: the nodes kept, every value
they take from the rest fed in (as a constant where the rest computed it from weights alone, else as a graph input),
and every value they give to the rest as an output.

The rules, in order:

1. The nodes kept are those of the main graph at the given positions, in the graph's order (the caller sorts the
   graph topologically first); a node that holds subgraphs is kept whole, with what they take from outside.
2. A weight (initializer) a kept node uses stays a weight, external data and all, unless ``values`` holds it (an
   input with a default, fed): then a weight of that value.
3. Any other value a kept node uses and no kept node makes comes from ``values`` (what the reference computed on
   the whole model): a weight where the whole model computed it from weights alone (so that a runtime sees the same
   constants as in the whole model: the DirectML provider places some nodes by whether an input is constant), a
   graph input otherwise. A Constant's output is a weight of the Constant's own value (``parity --all-tensors`` and
   ``reduce`` do not mark Constants, which cannot differ).
4. The outputs are the values kept nodes but Constants make that the whole model outputs or the rest of it uses;
   where there are none, the last kept node's outputs.
5. Inputs and outputs are declared as the model declares or ONNX's inference types them (``types``): symbolic
   dims stay symbolic, an unknown dim stays unknown, so that a runtime sees the same dynamic shapes as in the whole
   model (DirectML's provider fails on some nodes only then); only a value of unknown rank is declared with the
   shape the reference computed.
6. The window is the model's in everything but its graph: IR version, opsets, functions, producer, metadata.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import Message
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from onnx_gather.graphs.plumbing import RANDOM_OPS, implicit_inputs, is_constant
from onnx_gather.graphs.types import ValueType, value_types


def constant_values(graph: onnx.GraphProto) -> set[str]:
    """The values of ``graph`` computed from its weights alone: the weights, and the outputs of nodes that hold no
    subgraph, draw no random values and take only such values."""
    constant = {tensor.name for tensor in graph.initializer} | {""}
    for node in graph.node:
        if node.op_type in RANDOM_OPS or implicit_inputs(node) or not set(node.input) <= constant:
            continue
        constant.update(node.output)
    return constant - {""}


def _uses(node: onnx.NodeProto) -> set[str]:
    return (set(node.input) | implicit_inputs(node)) - {""}


def _declared(
    name: str, value: Any, types: Mapping[str, ValueType], declared: Mapping[str, onnx.ValueInfoProto]
) -> onnx.ValueInfoProto:
    """``name`` declared as the model types it (rule 5), else with the reference's type and shape; a value the model
    declares of another kind than a tensor (a sequence, a map) as the model declares it."""
    known = types.get(name)
    if known is not None and known.elem_type and known.dims is not None:
        return known.value_info(name)
    if name in declared and not declared[name].type.HasField("tensor_type"):
        return declared[name]
    array = np.asarray(value)
    kind = onnx.TensorProto.STRING if array.dtype.kind in "OSU" else helper.np_dtype_to_tensor_dtype(array.dtype)
    return helper.make_tensor_value_info(name, known.elem_type if known and known.elem_type else kind, array.shape)


def main_graph_types(model: onnx.ModelProto) -> dict[str, ValueType]:
    """The types of the main graph's values, as windows declare them (declared, else inferred)."""
    return value_types(model)[0]


def window(
    model: onnx.ModelProto,
    keep: Collection[int],
    values: Mapping[str, np.ndarray],
    types: Mapping[str, ValueType] | None = None,
) -> onnx.ModelProto:
    """The nodes of ``model``'s main graph at positions ``keep`` as a model of their own (the module's rules);
    ``types``: ``main_graph_types(model)``, made once by a caller that cuts many windows.

    Raises KeyError naming a value the window needs from outside that ``values`` lacks."""
    graph = model.graph
    types = main_graph_types(model) if types is None else types
    kept = [node for position, node in enumerate(graph.node) if position in keep]
    rest = [node for position, node in enumerate(graph.node) if position not in keep]
    made = {name for node in kept for name in node.output} - {""}
    needed = sorted(set().union(*(_uses(node) for node in kept)) - made)
    weights = {tensor.name: tensor for tensor in graph.initializer if tensor.name not in values}
    declared = {value.name: value for value in (*graph.input, *graph.output, *graph.value_info)}
    constant = constant_values(graph)
    constants = {node.output[0]: node for node in rest if is_constant(node)}

    result = helper.make_graph(kept, graph.name, [], [], doc_string=graph.doc_string)
    for name in needed:
        if name in weights:
            result.initializer.append(weights[name])
        elif name in constants:
            (value,) = ReferenceEvaluator(constants[name]).run(None, {})
            result.initializer.append(numpy_helper.from_array(np.asarray(value), name))
        elif name in constant:
            result.initializer.append(numpy_helper.from_array(np.asarray(values[name]), name))
        else:
            result.input.append(_declared(name, values[name], types, declared))
    wanted = {output.name for output in graph.output}.union(*(_uses(node) for node in rest))
    given = [name for node in kept if not is_constant(node) for name in node.output if name in wanted]
    outputs = given or [name for name in kept[-1].output if name]
    for name in outputs:
        result.output.append(_declared(name, values[name], types, declared) if name in values else declared[name])
    result.value_info.extend(value for value in graph.value_info if value.name in made and value.name not in outputs)
    return _with_graph(model, result)


def _with_graph(model: onnx.ModelProto, graph: onnx.GraphProto) -> onnx.ModelProto:
    """``model`` in everything but its graph, which is ``graph`` (rule 6), without copying the model's weights."""
    result = onnx.ModelProto()
    for field, value in model.ListFields():
        if field.name == "graph":
            continue
        if isinstance(value, Message):
            getattr(result, field.name).CopyFrom(value)
        elif isinstance(value, str | bytes | int | float):
            setattr(result, field.name, value)
        else:  # a repeated field: opsets, functions, metadata
            getattr(result, field.name).extend(value)
    result.graph.CopyFrom(graph)
    return result
