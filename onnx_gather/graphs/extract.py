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
   graph input otherwise, typed and sized as the value.
4. The outputs are the values kept nodes make that the whole model outputs or the rest of it uses; where there are
   none, the last kept node's outputs.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnx_gather.graphs.plumbing import RANDOM_OPS, implicit_inputs


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


def _typed(name: str, value: np.ndarray) -> onnx.ValueInfoProto:
    kind = onnx.TensorProto.STRING if value.dtype.kind in "OSU" else helper.np_dtype_to_tensor_dtype(value.dtype)
    return helper.make_tensor_value_info(name, kind, list(value.shape))


def window(model: onnx.ModelProto, keep: Collection[int], values: Mapping[str, np.ndarray]) -> onnx.ModelProto:
    """The nodes of ``model``'s main graph at positions ``keep`` as a model of their own (the module's rules).

    Raises KeyError naming a value the window needs from outside that ``values`` lacks."""
    graph = model.graph
    kept = [node for position, node in enumerate(graph.node) if position in keep]
    rest = [node for position, node in enumerate(graph.node) if position not in keep]
    made = {name for node in kept for name in node.output} - {""}
    needed = sorted(set().union(*(_uses(node) for node in kept)) - made)
    weights = {tensor.name: tensor for tensor in graph.initializer if tensor.name not in values}
    constant = constant_values(graph)

    result = helper.make_graph(kept, f"{graph.name} (reduced)", [], [])
    for name in needed:
        if name in weights:
            result.initializer.append(weights[name])
        elif name in constant:
            result.initializer.append(numpy_helper.from_array(np.asarray(values[name]), name))
        else:
            result.input.append(_typed(name, np.asarray(values[name])))
    wanted = {output.name for output in graph.output}.union(*(_uses(node) for node in rest))
    outputs = [name for node in kept for name in node.output if name in wanted] or [n for n in kept[-1].output if n]
    declared = {value.name: value for value in (*graph.output, *graph.value_info)}
    for name in outputs:
        result.output.append(_typed(name, np.asarray(values[name])) if name in values else declared[name])
    result.value_info.extend(value for value in graph.value_info if value.name in made and value.name not in outputs)

    reduced = helper.make_model(result, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    reduced.functions.extend(model.functions)
    reduced.producer_name = "onnx-gather reduce"
    return reduced
