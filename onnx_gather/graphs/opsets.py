"""The default-domain opset a DML node's lowering needs (``needed_opset``, ``scatter_opset``), and raising a model to it
where its opset is lower (``raise_opset``; docs/semantics.md, section 6): onnx's version converter on the main graph
(its subgraphs included; nodes of other domains, the DML ops among them, pass through unchanged) and on each
model-local function, which the converter would otherwise drop. What the converter cannot do is an ``OpsetError``
naming where: an operator with no adapter, a function whose nodes refer to its attributes (the converter replaces
such a reference by the attribute's default, measured with onnx 1.23: a silent change, so it is refused)."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper, version_converter

from onnx_gather.core.errors import UserError
from onnx_gather.graphs.plumbing import graphs
from onnx_gather.graphs.types import ValueType

MIN_OPSET = 11  # Range, NonZero, ScatterND, ScatterElements, If with outer-scope values, Mod: the lowering's floor


class OpsetError(UserError):
    """onnx's version converter cannot raise the model to the opset a lowering needs."""


# What each out-of-bounds mode's lowering of a Gather uses that opset 11 brought, where more than the native op runs.
_OPSET_11_USES = {
    "directml": "If, NonZero, ScatterND, ScatterElements, Range, Mod",
    "clamp": "Where, and Gather-11, which takes the negative indices it clamps to",
    "zero": "Where, and Gather-11, which takes the negative indices it clamps to",
}


def scatter_opset(mode: str, index_type: int) -> tuple[int, str]:
    """The default-domain opset a scatter's lowering needs, and why."""
    if mode == "clamp" and index_type in (TensorProto.UINT32, TensorProto.UINT64):
        return 12, f"out_of_bounds=clamp with {TensorProto.DataType.Name(index_type)} indices needs opset 12 (Min)"
    return MIN_OPSET, f"a scatter's lowering needs opset {MIN_OPSET} (Range, ScatterElements, Compress)"


def needed_opset(op_type: str, mode: str, native_alone: bool, index_type: int, batch: int = 0) -> tuple[int, str]:
    """The default-domain opset the lowering of one gather needs, and why: the standard op's (Gather 1, GatherElements
    and GatherND 11, GatherND with batch_dims 12); for a Gather that is more than the native op, 11, and 12 where that
    caps unsigned indices (``clamp``, ``zero``, ``error``); a Cast of unsigned indices, 6."""
    if op_type == "GatherND" and batch:
        return 12, "GatherND with batch_dims needs opset 12"
    signed = index_type in (TensorProto.INT32, TensorProto.INT64)
    if op_type != "GatherND" and not (native_alone or signed or mode.startswith("directml")):
        index_name = TensorProto.DataType.Name(index_type)
        return 12, f"out_of_bounds={mode} with {index_name} indices needs opset 12 (Min of unsigned integers)"
    if op_type != "Gather":
        return MIN_OPSET, f"{op_type} needs opset {MIN_OPSET}"
    if not native_alone:
        uses = _OPSET_11_USES[mode.removesuffix("-16bit")]
        return MIN_OPSET, f"out_of_bounds={mode} needs opset {MIN_OPSET} ({uses})"
    if not signed:
        return 6, f"{TensorProto.DataType.Name(index_type)} indices need Cast-6"
    return 1, ""


def _default_import(imports: list[onnx.OperatorSetIdProto]) -> onnx.OperatorSetIdProto | None:
    return next((o for o in imports if o.domain in ("", "ai.onnx")), None)


def _convert(model: onnx.ModelProto, target: int, where: str) -> onnx.ModelProto:
    try:
        return version_converter.convert_version(model, target)
    except (RuntimeError, ValueError) as error:  # the converter's C++ assertions come as RuntimeError
        message = " ".join(str(error).split())
        message = message.split("failed: ", 1)[-1]  # not the converter's source location and assertion
        version = _default_import(model.opset_import).version
        raise OpsetError(
            f"onnx's version converter cannot raise {where} from opset {version} to {target}: {message}"
        ) from None


def _refers_to_attributes(nodes: list[onnx.NodeProto]) -> bool:
    stack = list(nodes)
    while stack:
        node = stack.pop()
        for attribute in node.attribute:
            if attribute.ref_attr_name:
                return True
            stack.extend(n for g in (attribute.g, *attribute.graphs) for n in g.node)
    return False


def _raise_function(function: onnx.FunctionProto, imports: onnx.OperatorSetIdProto, target: int) -> None:
    where = f"function '{function.domain}.{function.name}'"
    if _refers_to_attributes(list(function.node)):
        raise OpsetError(
            f"{where} is at opset {imports.version} and refers to its attributes, which onnx's version "
            f"converter does not carry: it cannot be raised to opset {target}"
        )
    untyped = onnx.TypeProto()
    graph = helper.make_graph(
        list(function.node),
        function.name,
        [helper.make_value_info(name, untyped) for name in function.input],
        [helper.make_value_info(name, untyped) for name in function.output],
    )
    model = helper.make_model(graph, opset_imports=list(function.opset_import), ir_version=onnx.IR_VERSION)
    converted = _convert(model, target, where)
    del function.node[:]
    function.node.extend(converted.graph.node)
    imports.version = target


def _declared(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """The types the graphs of ``model`` declare (inputs, outputs, value_info; subgraphs included), by name."""
    return {v.name: v for graph in graphs(model) for v in (*graph.input, *graph.output, *graph.value_info)}


def _type_text(value: onnx.ValueInfoProto) -> str:
    value_type = ValueType.of(value)
    if value_type is None:
        return "a non-tensor"
    dims = "?" if value_type.dims is None else ",".join("?" if d is None else str(d) for d in value_type.dims)
    return f"{TensorProto.DataType.Name(value_type.elem_type)}[{dims}]"


def _contradicts(was: ValueType | None, now: ValueType | None) -> bool:
    """Whether ``now`` says something else than ``was`` (not merely more: a shape where there was none, a number
    where a dim was unknown)."""
    if was is None or now is None:
        return (was is None) != (now is None)
    if was.elem_type != now.elem_type or was.dims is None:
        return was.elem_type != now.elem_type
    if now.dims is None or len(now.dims) != len(was.dims):
        return True
    return any(a is not None and a != b for a, b in zip(was.dims, now.dims, strict=True))


def _check_types_kept(before: onnx.ModelProto, after: onnx.ModelProto, where: str, target: int) -> None:
    """Refuse a conversion that contradicts a declared type: the converter's Scan 8 to 9 adapter drops the batch dim
    from its inputs' declared sizes and does nothing else (onnx 1.23), which changes what the model computes for
    batches other than 1; and the lowering reads the ranks of the DML nodes' values from the declared types."""
    was, now = _declared(before), _declared(after)
    for name, value in was.items():
        if name in now and _contradicts(ValueType.of(value), ValueType.of(now[name])):
            raise OpsetError(
                f"onnx's version converter changed the declared type of {name!r} from "
                f"{_type_text(value)} to {_type_text(now[name])} when raising {where} to opset "
                f"{target}: refused, as what the model computes may have changed"
            )


def raise_opset(model: onnx.ModelProto, target: int) -> None:
    """Raise every default-domain import of ``model`` below ``target`` to it (the model's and its functions'), with
    onnx's version converter, in place; ``OpsetError`` where the converter cannot."""
    imports = _default_import(model.opset_import)
    if imports is None:  # no standard node yet: nothing to convert
        model.opset_import.append(helper.make_opsetid("", target))
    elif imports.version < target:
        without_functions = onnx.ModelProto()
        without_functions.CopyFrom(model)
        del without_functions.functions[:]
        where = f"graph {model.graph.name!r}"
        converted = _convert(without_functions, target, where)
        _check_types_kept(without_functions, converted, where, target)
        model.graph.CopyFrom(converted.graph)
        imports.version = target
    for function in model.functions:
        function_imports = _default_import(function.opset_import)
        if function_imports is not None and function_imports.version < target:
            _raise_function(function, function_imports, target)
