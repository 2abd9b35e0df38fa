"""A model widened to float64, for the exact yardstick (``runtime.exact``): what the model means, computed with 29
more bits than float32 keeps.

The rules:

1. Every FLOAT, FLOAT16 and BFLOAT16 value becomes DOUBLE: the declared inputs, outputs and value types of every
   graph (subgraphs and model-local functions included), the initializers (their data read, external data too),
   tensor attributes (a ``Constant``'s ``value``, ``value_float`` and ``value_floats``, ``ConstantOfShape``'s), and
   the element types operators are told to make (``Cast``'s ``to``, the random generators' and ``EyeLike``'s
   ``dtype``). Integer, boolean and string values stay as they are.
2. An operand whose operator takes no DOUBLE there (by ONNX's schema: ``Resize``'s ``scales``, ``QuantizeLinear``'s
   input and scale, ``DequantizeLinear``'s scale and output, ``DynamicQuantizeLinear``) keeps its own type: a
   ``Cast`` back to it before the node, and the node's output in its own type cast to DOUBLE after it. An operator
   of a domain ONNX has no schema for (``com.microsoft``'s) is kept in its own type the same way, whole. Where ONNX's
   inference cannot type an operand, it is taken to be FLOAT where the parameter takes floats only, and an output of
   an operator without a schema to be of its first float input's type.
3. Nothing else changes: the nodes, their order and names, the opsets.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnx_gather.graphs.plumbing import Body, Names, bodies, node_label
from onnx_gather.graphs.types import ValueType, value_types

WIDE = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16})
_DOUBLE = "tensor(double)"
# The attributes that name the element type an operator makes (rule 1).
_TYPE_ATTRIBUTES = frozenset({"to", "dtype"})


@dataclass
class Widened:
    """The model widened (the module's rules) and the nodes kept in their own type, by label, with why."""

    model: onnx.ModelProto
    kept: dict[str, str] = field(default_factory=dict)


def type_text(elem_type: int) -> str:
    """An element type as ONNX's schemas write it: ``tensor(float16)``."""
    return f"tensor({TensorProto.DataType.Name(elem_type).lower()})"


def _wide_array(tensor: onnx.TensorProto, folder: Path | None) -> onnx.TensorProto:
    """``tensor`` in memory, as DOUBLE where it is of a type rule 1 widens."""
    array = numpy_helper.to_array(tensor, base_dir=str(folder) if folder is not None else "")
    if tensor.data_type in WIDE:
        array = np.asarray(array, np.float64)
    return numpy_helper.from_array(array, tensor.name)


def _retype(value: onnx.TypeProto) -> None:
    kind = value.WhichOneof("value")
    if kind == "tensor_type" and value.tensor_type.elem_type in WIDE:
        value.tensor_type.elem_type = TensorProto.DOUBLE
    elif kind in ("sequence_type", "optional_type"):
        _retype(getattr(value, kind).elem_type)


def _widen_attributes(node: onnx.NodeProto, folder: Path | None) -> None:
    for position, attribute in enumerate(node.attribute):
        if attribute.type == onnx.AttributeProto.TENSOR and attribute.t.data_type in WIDE:
            attribute.t.CopyFrom(_wide_array(attribute.t, folder))
        elif attribute.type == onnx.AttributeProto.TENSORS:
            for index, tensor in enumerate(attribute.tensors):
                if tensor.data_type in WIDE:
                    attribute.tensors[index].CopyFrom(_wide_array(tensor, folder))
        elif attribute.type == onnx.AttributeProto.INT and attribute.name in _TYPE_ATTRIBUTES and attribute.i in WIDE:
            attribute.i = TensorProto.DOUBLE
        elif node.op_type == "Constant" and attribute.name in ("value_float", "value_floats"):
            values = [attribute.f] if attribute.name == "value_float" else list(attribute.floats)
            dims = [] if attribute.name == "value_float" else [len(values)]
            tensor = helper.make_tensor("value", TensorProto.DOUBLE, dims, values)
            node.attribute[position].CopyFrom(helper.make_attribute("value", tensor))


def _schema(node: onnx.NodeProto, opsets: Mapping[str, int]) -> onnx.defs.OpSchema | None:
    domain = "" if node.domain == "ai.onnx" else node.domain
    try:
        return onnx.defs.get_schema(node.op_type, opsets.get(domain, 1), domain)
    except onnx.defs.SchemaError:
        return None


def _parameters(params: list, count: int) -> list:
    """The formal parameter each of ``count`` operands binds to (a variadic last one takes the rest)."""
    return [params[min(index, len(params) - 1)] for index in range(count)] if params else []


_FLOATS = frozenset(map(type_text, WIDE))
# operand position -> its formal parameter's name, and the type it keeps where its value's type is unknown
_Narrowed = dict[int, tuple[str, int | None]]


def _narrow(schema: onnx.defs.OpSchema | None, node: onnx.NodeProto) -> tuple[_Narrowed, _Narrowed]:
    """Which inputs and outputs of ``node`` keep their own type (rule 2), each with its parameter's name and the
    type it keeps where the model's inference cannot tell its value's (FLOAT where the operand takes floats only,
    FLOAT among them)."""
    if schema is None:
        return {i: ("", None) for i in range(len(node.input))}, {i: ("", None) for i in range(len(node.output))}
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}

    def narrowed(params: list, count: int) -> _Narrowed:
        found: _Narrowed = {}
        for position, param in enumerate(_parameters(params, count)):
            takes = allowed.get(param.type_str, {param.type_str})
            if _DOUBLE in takes or not any(kind.startswith("tensor(") for kind in takes):  # or a sequence
                continue
            fallback = TensorProto.FLOAT if type_text(TensorProto.FLOAT) in takes <= _FLOATS else None
            found[position] = (param.name, fallback)
        return found

    return narrowed(schema.inputs, len(node.input)), narrowed(schema.outputs, len(node.output))


def _own(names: Sequence[str], narrowed: _Narrowed, types: Mapping[str, ValueType]) -> dict[int, tuple[str, int]]:
    """The operands of ``narrowed`` that are floats, each with its parameter's name and the type it keeps: its own,
    or where inference cannot tell it, the type ``narrowed`` gives."""
    own = {}
    for position, (param, fallback) in narrowed.items():
        name = names[position] if position < len(names) else ""
        known = types.get(name)
        elem_type = known.elem_type if known is not None and known.elem_type else fallback
        if name and elem_type in WIDE:
            own[position] = (param, elem_type)
    return own


def _keep_types(
    body: Body,
    types: Mapping[str, ValueType],
    opsets: Mapping[str, int],
    functions: Collection[tuple[str, str]],
    names: Names,
) -> dict[str, str]:
    """Rule 2 on the nodes of ``body``: the Casts around each operand that keeps its type; the nodes so kept, by
    label, with why."""
    kept: dict[str, str] = {}
    rewritten = []
    for position, node in enumerate(body.nodes):
        if (node.domain, node.op_type) in functions:  # a model-local function is widened itself
            rewritten.append(node)
            continue
        schema = _schema(node, opsets)
        inputs, outputs = _narrow(schema, node)
        own = _own(node.input, inputs, types)
        if schema is None and own:  # an output inference cannot type is taken to be of its first float input's type
            outputs = {i: ("", next(iter(own.values()))[1]) for i in outputs}
        made = _own(node.output, outputs, types)
        if not own and not made:
            rewritten.append(node)
            continue
        params = ", ".join(dict.fromkeys(param for param, _ in (*own.values(), *made.values())))
        why = f"{node.op_type} takes no float64 {params}" if schema else f"no schema for domain {node.domain!r}"
        kept[node_label(node, position)] = why
        for i, (_, elem_type) in own.items():
            narrowed = names.fresh(f"{node.input[i]}_own")
            rewritten.append(
                helper.make_node("Cast", [node.input[i]], [narrowed], names.fresh("Cast_own"), to=elem_type)
            )
            node.input[i] = narrowed
        casts = []
        for i in made:
            original = node.output[i]
            node.output[i] = names.fresh(f"{original}_own")
            casts.append(
                helper.make_node("Cast", [node.output[i]], [original], names.fresh("Cast_wide"), to=TensorProto.DOUBLE)
            )
        rewritten += [node, *casts]
    if kept:
        body.replace_nodes(rewritten)
    return kept


def widen(model: onnx.ModelProto, folder: Path | None = None) -> Widened:
    """``model`` widened to float64 by the module's rules; ``folder``: where its external data lies (read into the
    result, which is self-contained)."""
    types = value_types(model)  # the model's own types, for rule 2
    result = onnx.ModelProto()
    result.CopyFrom(model)
    names = Names(result)
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in result.opset_import}
    functions = {(f.domain, f.name) for f in result.functions}
    kept: dict[str, str] = {}
    for body in reversed(bodies(result)):  # subgraphs first: rebuilding a body's nodes copies them
        container = body.container
        for node in body.nodes:
            _widen_attributes(node, folder)
        if isinstance(container, onnx.GraphProto):
            for value in (*container.input, *container.output, *container.value_info):
                _retype(value.type)
            for index, tensor in enumerate(container.initializer):
                if tensor.data_type in WIDE or tensor.data_location == TensorProto.EXTERNAL:
                    container.initializer[index].CopyFrom(_wide_array(tensor, folder))
            for sparse in container.sparse_initializer:
                if sparse.values.data_type in WIDE:
                    sparse.values.CopyFrom(_wide_array(sparse.values, folder))
        kept.update(_keep_types(body, types.get(body.scope, {}), opsets, functions, names))
    return Widened(result, kept)
