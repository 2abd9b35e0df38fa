"""Value types: a tensor's element type and dims, declared or inferred by ONNX's shape inference, per scope (the
main graph with its subgraphs, and each function, typed from its call sites)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from onnx_gather.core.sizes import dim_size
from onnx_gather.graphs.plumbing import bodies, graphs


def numpy_type(elem_type: int) -> np.dtype:
    """The numpy type of an ONNX element type (ml_dtypes' for BFLOAT16, the FLOAT8s and the 4- and 2-bit ones)."""
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def array_type(dtype: np.dtype) -> str:
    """An array's element type as reports say it, in ONNX's words: STRING for numpy's strings (``<U32``, bytes,
    objects), FLOAT for float32, BFLOAT16 for ml_dtypes' bfloat16; numpy's own name where ONNX has none."""
    if dtype.kind in "OSU":
        return "STRING"
    try:
        return onnx.TensorProto.DataType.Name(helper.np_dtype_to_tensor_dtype(dtype))
    except ValueError:
        return dtype.name


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
        return ValueType(tensor.elem_type, tuple(dim_size(d) for d in tensor.shape.dim))

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
    for graph in graphs(inferred):
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
    types and dims of weights): converting a large model must not hold its weights twice. A dim written as a negative
    size (-1: dynamic, ``core.sizes.dim_size``) is an unknown dim there, for ONNX's shape inference computes with it
    as a size (a Conv of stride 2 over it gives 0, data propagation a Shape holding -1) and ONNX Runtime's symbolic
    inference fails on it."""
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
    for graph in graphs(light):
        for value in (*graph.input, *graph.output, *graph.value_info):
            for dim in value.type.tensor_type.shape.dim:
                if dim_size(dim) is None:
                    dim.Clear()
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
    for inferred_graph in graphs(_infer(probe)):
        _collect(types, inferred_graph)
    return types
