"""The graph work shared by the converter and the lowering: every node list of a model, fresh names,
value types, and an emitter of standard nodes that respects the opset in force."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnx_gather.core.contract import DOMAIN, DOMAIN_VERSION

# onnxruntime 1.31 reads IR versions up to 13; 10 is what onnx 1.16 and later write for opset 21.
IR_VERSION = 10
ONNX_OPSET = 17


@dataclass
class Body:
    """A node list a rewrite may change: the main graph, a subgraph, or a model-local function."""

    container: onnx.GraphProto | onnx.FunctionProto
    opset: int  # the default domain's version in force here
    where: str  # for messages: "graph 'main'", "function 'local.F'", "subgraph 'body' of node 'loop'"
    scope: int  # bodies sharing a scope share value names: the main graph and its subgraphs; each function

    @property
    def nodes(self) -> Sequence[onnx.NodeProto]:
        return self.container.node

    def replace_nodes(self, nodes: list[onnx.NodeProto]) -> None:
        del self.container.node[:]
        self.container.node.extend(nodes)


def counted(count: int, noun: str) -> str:
    """``1 gather``, ``2 gathers``: a count with its noun in the number it takes."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


# Operators that draw new values on every run (ONNX's random generators; Bernoulli from opset 15).
RANDOM_OPS = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
                        "Bernoulli"})  # fmt: skip


def random_nodes(model: onnx.ModelProto) -> list[str]:
    """The nodes of ``model`` (subgraphs included) that draw random values, as ``Op 'name'``."""
    return [f"{node.op_type} {node.name or unnamed(node, position)!r}" for body in bodies(model)
            for position, node in enumerate(body.nodes)
            if node.domain in ("", "ai.onnx") and node.op_type in RANDOM_OPS]  # fmt: skip


def unnamed(node: onnx.NodeProto, position: int) -> str:
    """What reports call a node without a name: its op type and position in its graph."""
    return f"{node.op_type} #{position}"


def subgraphs(node: onnx.NodeProto) -> Iterator[tuple[str, onnx.GraphProto]]:
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            yield attribute.name, attribute.g
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            yield from ((attribute.name, g) for g in attribute.graphs)


def _opset(imports: Sequence[onnx.OperatorSetIdProto], default: int) -> int:
    return next((o.version for o in imports if o.domain in ("", "ai.onnx")), default)


def bodies(model: onnx.ModelProto) -> list[Body]:
    """Every node list of the model, subgraphs at any depth included (no recursion: depth is unbounded).

    Each body comes before its subgraphs. A rewrite goes through them in reverse, subgraphs first: replacing
    a body's nodes copies them, subgraphs included, so a subgraph must be final before its parent is rebuilt.
    """
    model_opset = _opset(model.opset_import, 0)
    roots = [Body(model.graph, model_opset, f"graph {model.graph.name!r}", 0)]
    for index, function in enumerate(model.functions, start=1):
        opset = _opset(function.opset_import, model_opset)
        roots.append(Body(function, opset, f"function '{function.domain}.{function.name}'", index))
    found, stack = [], list(reversed(roots))
    while stack:
        body = stack.pop()
        found.append(body)
        for node in body.nodes:
            for name, graph in subgraphs(node):
                where = f"subgraph {name!r} of node {node.name or node.op_type!r} in {body.where}"
                stack.append(Body(graph, body.opset, where, body.scope))
    return found


def _graphs(model: onnx.ModelProto) -> Iterator[onnx.GraphProto]:
    for body in bodies(model):
        if isinstance(body.container, onnx.GraphProto):
            yield body.container


class Names:
    """Fresh value and node names, unique across the whole model."""

    def __init__(self, model: onnx.ModelProto) -> None:
        used: set[str] = set()
        for body in bodies(model):
            for node in body.nodes:
                used.update(node.input, node.output, (node.name,))
            container = body.container
            if isinstance(container, onnx.GraphProto):
                used.update(v.name for v in (*container.input, *container.output, *container.value_info))
                used.update(t.name for t in container.initializer)
            else:
                used.update(container.input, container.output)
        self._used = used

    def fresh(self, base: str) -> str:
        name, count = base, 0
        while name in self._used:
            count += 1
            name = f"{base}_{count}"
        self._used.add(name)
        return name


@dataclass(frozen=True)
class ValueType:
    """A tensor's element type and, where known, its dims (an int, a symbol, or None for unknown)."""

    elem_type: int
    dims: tuple[int | str | None, ...] | None  # None: rank unknown

    @property
    def rank(self) -> int | None:
        return None if self.dims is None else len(self.dims)

    @staticmethod
    def of(value: onnx.ValueInfoProto) -> ValueType | None:
        if not value.type.HasField("tensor_type"):
            return None
        tensor = value.type.tensor_type
        if not tensor.HasField("shape"):
            return ValueType(tensor.elem_type, None)
        dims = tuple(
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim
        )  # fmt: skip
        return ValueType(tensor.elem_type, dims)

    def value_info(self, name: str) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, self.elem_type, self.dims)


def _collect(types: dict[str, ValueType], graph: onnx.GraphProto) -> None:
    for value in (*graph.input, *graph.output, *graph.value_info):
        value_type = ValueType.of(value)
        if value_type is not None and value.name not in types:
            types[value.name] = value_type
    for tensor in graph.initializer:
        types.setdefault(tensor.name, ValueType(tensor.data_type, tuple(tensor.dims)))


def _infer(model: onnx.ModelProto, propagate: bool = False) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=propagate)
    except Exception:  # an invalid or unusual model: use the types it declares, or infers without propagation
        return _infer(model, False) if propagate else model


def value_types(model: onnx.ModelProto, propagate: bool = False) -> dict[int, dict[str, ValueType]]:
    """Value types per scope (see ``Body.scope``): declared, and inferred by ONNX shape inference; with
    ``propagate``, its data propagation makes the dims computed from shapes known too.

    A function's values are typed from its call sites, where every call site agrees on the input types.
    """
    inferred = _infer(without_weights(model), propagate)
    scopes: dict[int, dict[str, ValueType]] = {0: {}}
    for graph in _graphs(inferred):
        _collect(scopes[0], graph)
    functions = {(f.domain, f.name): (index, f) for index, f in enumerate(model.functions, start=1)}
    # Functions calling functions are typed once their callers are: repeat while that adds any.
    pending = dict(functions)
    progress = True
    while pending and progress:
        progress = False
        for key, (index, function) in list(pending.items()):
            inputs = _call_site_types(model, key, scopes, functions)
            if inputs is None:
                continue
            scopes[index] = _function_types(model, function, inputs)
            del pending[key]
            progress = True
    return scopes


def without_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy to infer types on, without the main graph's large initializer data (inference needs only the
    types and dims of weights): converting a large model must not hold its weights twice."""
    graph = model.graph
    light_graph = helper.make_graph(
        list(graph.node), graph.name, list(graph.input), list(graph.output), value_info=list(graph.value_info)
    )
    for tensor in graph.initializer:
        if tensor.ByteSize() <= 4096:  # shapes, axes, counts: inference reads their values
            light_graph.initializer.append(tensor)
        else:
            light_graph.initializer.add(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
    light = onnx.ModelProto(ir_version=model.ir_version, opset_import=model.opset_import, functions=model.functions)
    light.graph.CopyFrom(light_graph)
    return light


def _call_site_types(
    model: onnx.ModelProto,
    key: tuple[str, str],
    scopes: dict[int, dict[str, ValueType]],
    functions: dict[tuple[str, str], tuple[int, onnx.FunctionProto]],
) -> list[ValueType | None] | None:
    """The input types every call of function ``key`` agrees on, or None while a caller is untyped."""
    agreed: list[ValueType | None] | None = None
    for body in bodies(model):
        for node in body.nodes:
            if (node.domain, node.op_type) != key:
                continue
            types = scopes.get(body.scope)
            if types is None:
                return None
            found = [types.get(name) for name in node.input]
            if agreed is None:
                agreed = found
            else:
                agreed = [a if a == f else None for a, f in zip(agreed, found, strict=False)]
    return agreed


def _function_types(
    model: onnx.ModelProto, function: onnx.FunctionProto, inputs: list[ValueType | None]
) -> dict[str, ValueType]:
    graph_inputs = [
        (t.value_info(name) if t is not None else helper.make_value_info(name, onnx.TypeProto()))
        for name, t in zip(function.input, inputs, strict=False)
    ]
    graph = helper.make_graph(list(function.node), function.name, graph_inputs, [])
    probe = helper.make_model(graph, opset_imports=list(function.opset_import), ir_version=model.ir_version)
    probe.functions.extend(model.functions)
    types: dict[str, ValueType] = {}
    for inferred_graph in _graphs(_infer(probe)):
        _collect(types, inferred_graph)
    return types


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
        self, body: Body, names: Names, prefix: str, share_constants: bool = False,
        initializers: Initializers | None = None,
    ) -> None:  # fmt: skip
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
        opsets.append(helper.make_opsetid(DOMAIN, DOMAIN_VERSION))
    return helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION)
