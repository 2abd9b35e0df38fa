"""Building standard nodes: an emitter that respects the opset in force, constants shared as initializers, and
the single-node models the tests, tools and nested sessions use."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnx_gather.core.contract import DOMAIN, DOMAIN_VERSION, SCATTER_BY_STANDARD, SCATTER_BY_TYPE
from onnx_gather.graphs.plumbing import Body, Names, bodies

# onnxruntime 1.31 reads IR versions up to 13; 10 is what onnx 1.16 and later write for opset 21.
IR_VERSION = 10
ONNX_OPSET = 17


class Initializers:
    """Constants as initializers of a model's main graph, one per value (by type, shape and bytes), which the main
    graph and every subgraph of it can use: no Constant node, nothing made twice."""

    def __init__(self, graph: onnx.GraphProto, names: Names) -> None:
        self._graph, self._names = graph, names
        self._made: dict[tuple, str] = {}
        self.values: dict[str, np.ndarray] = {}  # name -> value, for arithmetic on constants

    def get(self, array: np.ndarray, step: str) -> str:
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self._made:
            self._made[key] = self._names.fresh(f"{DOMAIN}/{step}")
            self._graph.initializer.append(numpy_helper.from_array(array, self._made[key]))
            self.values[self._made[key]] = array
        return self._made[key]


# Integer ops on constants, as ONNX defines them (numpy's int64 arithmetic wraps as ONNX Runtime's does).
_FOLDED = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}


def prune_initializers(model: onnx.ModelProto, made: Initializers) -> None:
    """Remove the initializers ``made`` that no node ended up using (a constant folded into another)."""
    used = {name for body in bodies(model) for node in body.nodes for name in node.input}
    used.update(value.name for value in model.graph.output)
    kept = [t for t in model.graph.initializer if t.name in used or t.name not in made.values]
    if len(kept) != len(model.graph.initializer):
        del model.graph.initializer[:]
        model.graph.initializer.extend(kept)


class Emitter:
    """Builds standard nodes into a list, in the form the default opset in force takes."""

    def __init__(
        self,
        body: Body,
        names: Names,
        prefix: str,
        share_constants: bool = False,
        initializers: Initializers | None = None,
    ) -> None:
        self.opset = body.opset
        self.names = names
        self.prefix = prefix
        self.nodes: list[onnx.NodeProto] = []
        # With ``initializers``, constants are initializers (for bodies that see the main graph's). Else, with
        # ``share_constants``, a Constant node made before is used again (by type, shape and bytes); a fork starts
        # with a copy: its subgraph sees what came before it, and what it makes stays inside. (The converter does not
        # share: lowering takes away the helpers only one node uses.)
        self._initializers = initializers
        self._constants: dict[tuple, str] | None = {} if share_constants else None

    def node(
        self, op_type: str, inputs: Sequence[str], step: str, output: str | None = None, domain: str = "", **attributes
    ) -> str:
        """Append ``op_type(inputs)`` named ``prefix/step``; returns its output (a fresh name unless given).

        Integer arithmetic on constants is done here, once (a constant instead of a node ONNX Runtime would fold).
        """
        if output is None and op_type in _FOLDED and self._initializers is not None and not attributes:
            values = [self._initializers.values.get(name) for name in inputs]
            if all(value is not None and value.dtype.kind == "i" for value in values):
                result = _FOLDED[op_type](*values)
                return self.constant(result, result.dtype, step)
            if op_type == "Mul" and values[1] is not None and values[1].shape == () and values[1] == 1:
                return inputs[0]  # times a scalar 1
        output = output or self.names.fresh(f"{self.prefix}/{step}")
        name = self.names.fresh(f"{self.prefix}/{step}")
        self.nodes.append(helper.make_node(op_type, list(inputs), [output], name=name, domain=domain, **attributes))
        return output

    def fork(self) -> Emitter:
        """An emitter of the same opset, names and prefix with a node list of its own (for a subgraph)."""
        other = copy.copy(self)
        other.nodes = []
        other._constants = None if self._constants is None else dict(self._constants)
        return other

    def constant(self, values: object, dtype: np.dtype | type, step: str) -> str:
        array = np.asarray(values, dtype=dtype)
        if self._initializers is not None:
            return self._initializers.get(array, step)
        key = (array.dtype.str, array.shape, array.tobytes())
        if self._constants is not None and key in self._constants:
            return self._constants[key]
        tensor = numpy_helper.from_array(array, self.names.fresh(f"{self.prefix}/{step}"))
        output = self.node("Constant", [], step, value=tensor)
        if self._constants is not None:
            self._constants[key] = output
        return output

    def _axes_op(self, op_type: str, value: str, axes: Sequence[int], step: str, output: str | None) -> str:
        if self.opset >= 13:
            return self.node(op_type, [value, self.constant(list(axes), np.int64, f"{step}_axes")], step, output)
        return self.node(op_type, [value], step, output, axes=list(axes))

    def unsqueeze(self, value: str, axes: Sequence[int], step: str, output: str | None = None) -> str:
        return self._axes_op("Unsqueeze", value, axes, step, output)

    def squeeze(self, value: str, axes: Sequence[int], step: str, output: str | None = None) -> str:
        return self._axes_op("Squeeze", value, axes, step, output)

    def slice(self, value: str, start: int, end: int, step: str) -> str:
        """``value[start:end]`` along axis 0."""
        if self.opset >= 10:
            bounds = [self.constant([start], np.int64, f"{step}_start"), self.constant([end], np.int64, f"{step}_end")]
            return self.node("Slice", [value, *bounds], step)
        return self.node("Slice", [value], step, starts=[start], ends=[end])

    def pad(self, value: str, count: int, step: str, output: str | None = None) -> str:
        """``value`` with ``count`` leading dimensions of size 1 added."""
        if count == 0:
            return value if output is None else self.node("Identity", [value], step, output)
        return self.unsqueeze(value, range(count), step, output)

    def unpad(self, value: str, count: int, step: str, output: str | None = None) -> str:
        """``value`` with ``count`` leading dimensions of size 1 removed."""
        if count == 0:
            return value if output is None else self.node("Identity", [value], step, output)
        return self.squeeze(value, range(count), step, output)


def single_node_model(
    op_type: str, input_dtype: np.dtype, indices_dtype: np.dtype, domain: str = DOMAIN, **attributes: object
) -> onnx.ModelProto:
    """A model ``output = op_type(input, indices, **attributes)`` with shapes left to the feeds; for a scatter
    (standard or DML) ``op_type(input, indices, updates)``, the updates of the input's type.

    For the DML ops (domain ``onnx_gather``) the caller passes every attribute: the bridge has no
    optional attributes.
    """
    to_onnx = helper.np_dtype_to_tensor_dtype
    names = ["input", "indices"]
    if op_type in (SCATTER_BY_TYPE if domain == DOMAIN else SCATTER_BY_STANDARD):
        names.append("updates")
    node = helper.make_node(op_type, names, ["output"], name=op_type.lower(), domain=domain, **attributes)
    element_type = to_onnx(np.dtype(input_dtype))
    graph = helper.make_graph(
        [node],
        op_type,
        [
            helper.make_tensor_value_info(
                name, to_onnx(np.dtype(indices_dtype)) if name == "indices" else element_type, None
            )
            for name in names
        ],
        [helper.make_tensor_value_info("output", element_type, None)],
    )
    opsets = [helper.make_opsetid("", ONNX_OPSET)]
    if domain == DOMAIN:
        opsets.append(helper.make_opsetid(DOMAIN, DOMAIN_VERSION))
    return helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION)
