"""Standard ONNX ``Gather``, ``GatherElements`` and ``GatherND`` into DML form, as ONNX Runtime's DirectML provider
maps them, in every graph, subgraph and model-local function; what becomes of each gather is decided by
``graphs.analysis``, each scatter's by ``graphs.scatter_form``. What ``to_dml`` writes for a node, and each of its
parameters: docs/semantics.md, "6.1 What to_dml does" (``onnx-gather docs semantics``).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnx_gather.core import contract, semantics
from onnx_gather.core.contract import DOMAIN
from onnx_gather.core.errors import UserError
from onnx_gather.core.scatter import DUPLICATE_MODES
from onnx_gather.graphs.analysis import Analysis, Crop, GatherPlan, Left, carried_note, parse_dimension_count
from onnx_gather.graphs.changes import NodeChange, Report, count_ops
from onnx_gather.graphs.emit import Emitter
from onnx_gather.graphs.placement.gather import FEATURE_LEVELS, cpu_reason
from onnx_gather.graphs.placement.nodes import provider_refusal
from onnx_gather.graphs.plumbing import Body, bodies, node_label, sort_topologically
from onnx_gather.graphs.ranks import Observer
from onnx_gather.graphs.scatter_form import emit_scatter, plan_scatter
from onnx_gather.graphs.types import ValueType

# An end past any size: Slice clamps it, so the slice keeps the whole axis (lowering.through recognises it).
WHOLE_AXIS = 2**62
# The key of a DML node's ``metadata_props`` entry naming the nodes ``to_dml`` wrote around it: a JSON object, each
# role it wrote (slice_input, carry_input, pad_input, pad_indices, unpad_output, carry_output) -> that node's name.
WROTE = f"{DOMAIN}.wrote"


PROVIDER_FAILURES = ("raise", "onnx")  # what to_dml does with a gather the provider fails


class ProviderFailure(semantics.GatherError):
    """A standard gather that ONNX Runtime's DirectML provider fails: DirectML computes nothing for it."""


class _Converter:
    def __init__(
        self, model: onnx.ModelProto, analysis: Analysis, out_of_bounds: str, provider_failures: str, duplicates: str
    ) -> None:
        self.model = model
        self.analysis = analysis
        self.names = analysis.names
        self.out_of_bounds = out_of_bounds
        self.scatter_duplicates = duplicates
        self.provider_failures = provider_failures
        self.report = Report()

    def run(self) -> None:
        for body in reversed(bodies(self.model)):
            types = self.analysis.types.get(body.scope, {})
            rebuilt, changed, declared = [], False, _declarations(body)
            for index, node in enumerate(body.nodes):
                new_nodes = None
                if node.domain in ("", "ai.onnx") and node.op_type in contract.GATHER_OPS:
                    new_nodes, typed = self._convert(body, types, node, index)
                elif node.domain in ("", "ai.onnx") and node.op_type in contract.SCATTER_BY_STANDARD:
                    new_nodes, typed = self._convert_scatter(body, types, node, index)
                if new_nodes is not None:
                    rebuilt.extend(new_nodes)
                    _record(body, declared, typed)
                    changed = True
                    continue
                rebuilt.append(node)
            if changed:
                body.replace_nodes(rebuilt)
                _import_domain(body.container.opset_import if isinstance(body.container, onnx.FunctionProto) else None)
        if self.report.changed:
            _import_domain(self.model.opset_import)

    def _convert(
        self, body: Body, types: dict[str, ValueType], node: onnx.NodeProto, index: int
    ) -> tuple[list[onnx.NodeProto] | None, dict[str, ValueType]]:
        plan, change = self.analysis.decide(body, types, node, index)
        if change.fails and self.provider_failures == "raise":
            raise _failure(change)
        if isinstance(plan, Left):
            self.report.left.append(change)
            return None, {}
        if plan.crop is not None and self.provider_failures == "raise":
            plan = dataclasses.replace(plan, crop=None)  # dynamic dims: the DML node fails if they differ, as DirectML
        self.report.changed.append(change)
        return self._emit(body, node, change.result, plan, types.get(node.output[0]))

    def _emit(
        self, body: Body, node: onnx.NodeProto, name: str, plan: GatherPlan, known: ValueType | None
    ) -> tuple[list[onnx.NodeProto], dict[str, ValueType]]:
        """Slice, carry, pad -> the DML node -> unpad, carry back, ending in the original output's name.

        Returns also the type of every value it makes, and of its inputs and output, with all that is known of
        their shapes (``known``: the output's type before), for ``_record``: the lowering needs the DML node's
        ranks, and shape inference cannot see through the DML node, nor past a contrib operator in front of it."""
        emit = Emitter(body, self.names, name)
        data, indices, form = plan.data, plan.indices, plan.form
        carried = plan.carrier or data.elem_type
        typed: dict[str, ValueType] = {}
        wrote: dict[str, str] = {}  # role -> the value its node makes (the WROTE entry)
        x = node.input[0]
        x_dims = data.dims
        if plan.crop is not None:
            x = wrote["slice_input"] = _emit_crop(emit, x, node.input[1], indices.dims, plan.axis, plan.crop)
            x_dims = tuple(d if k == plan.axis else indices.dims[k] for k, d in enumerate(data.dims))
            typed[x] = ValueType(data.elem_type, x_dims)
        if plan.carrier is not None:
            x = wrote["carry_input"] = emit.node("Cast", [x], "carry_input", to=plan.carrier)
            typed[x] = ValueType(carried, x_dims)
        if form.input_ones:
            x = wrote["pad_input"] = emit.pad(x, form.input_ones, "pad_input")
        typed[x] = ValueType(carried, (1,) * form.input_ones + x_dims)
        i = node.input[1]
        if form.indices_ones:
            i = wrote["pad_indices"] = emit.pad(i, form.indices_ones, "pad_indices")
        typed[i] = ValueType(indices.elem_type, (1,) * form.indices_ones + indices.dims)
        last = form.output_ones == 0 and plan.carrier is None
        dml_output = node.output[0] if last else self.names.fresh(f"{name}/output")
        mode = self.out_of_bounds
        if mode == "directml" and plan.carrier is not None and plan.data.elem_type != TensorProto.BOOL:
            mode = contract.DIRECTML_16BIT  # the op sees FLOAT32; DirectML's reading depends on the 2-byte type
        attributes = {**form.attributes, "out_of_bounds": mode}
        dml = helper.make_node(
            contract.BY_STANDARD[node.op_type].op_type, [x, i], [dml_output], name=name, domain=DOMAIN, **attributes
        )
        emit.nodes.append(dml)
        out_dims = _known_dims(plan.out_dims, known)
        typed[dml_output] = ValueType(carried, (1,) * form.output_ones + out_dims)
        y = dml_output
        if form.output_ones:
            y = wrote["unpad_output"] = emit.unpad(
                y, form.output_ones, "unpad_output", None if plan.carrier else node.output[0]
            )
            typed[y] = ValueType(carried, out_dims)
        if plan.carrier is not None:
            wrote["carry_output"] = emit.node("Cast", [y], "carry_output", node.output[0], to=data.elem_type)
        typed[node.output[0]] = ValueType(data.elem_type, out_dims)
        _mark_wrote(dml, emit.nodes, wrote)
        return emit.nodes, typed

    def _convert_scatter(
        self, body: Body, types: dict[str, ValueType], node: onnx.NodeProto, index: int
    ) -> tuple[list[onnx.NodeProto] | None, dict[str, ValueType]]:
        """A standard scatter into DML form (``graphs.scatter_form``), or None where it stays standard."""
        refusal = provider_refusal(node, body.opset, types)
        placed = self.analysis.placed.get(body.where)
        if not refusal and placed is not None and placed[index].by_its_graph:  # keep_on_cpu: as the provider does
            refusal = cpu_reason(placed[index].why)
        analysis = self.analysis
        plan = plan_scatter(body, types, node, analysis.dimension_count, analysis.carrying, self.out_of_bounds, refusal)
        label = node_label(node, index)
        if not isinstance(plan, Left) and plan.fails and self.provider_failures == "onnx":
            plan = Left(f"DirectML fails it ({plan.fails}); left standard for ONNX's values")
        if isinstance(plan, Left):
            self.report.left.append(
                NodeChange(where=body.where, node=label, op_type=node.op_type, result="", reason=plan.reason)
            )
            return None, {}
        name = node.name or self.names.fresh(f"{node.op_type}_{index}")
        data, indices = plan.data, plan.inputs[1]
        change = NodeChange(
            where=body.where,
            node=label,
            op_type=node.op_type,
            result=name,
            fails=plan.fails,
            dimension_count=plan.dimension_count,
            data_type=data.elem_type,
            index_type=indices.elem_type,
            note=carried_note(data.elem_type, plan.carrier),
            data=data,
            indices=indices,
            axis=plan.attributes.get("axis"),
            out_rank=data.rank,
        )
        if plan.fails:
            raise _failure(change)
        self.report.changed.append(change)
        emit = Emitter(body, self.names, name)
        last = plan.ones(data) == 0 and plan.carrier is None
        output = node.output[0] if last else self.names.fresh(f"{name}/output")
        modes = (self.out_of_bounds, self.scatter_duplicates)
        dml, typed, wrote = emit_scatter(emit, node, name, plan, modes, output)
        _mark_wrote(dml, emit.nodes, wrote)
        return emit.nodes, typed


def _failure(change: NodeChange) -> ProviderFailure:
    return ProviderFailure(
        f"{change.op_type} node {change.node!r} ({change.where}) fails on DirectML: {change.fails}. To compute "
        "ONNX's values instead, convert with provider_failures='onnx' (--provider-failures onnx)"
    )


def _mark_wrote(dml: onnx.NodeProto, nodes: list[onnx.NodeProto], wrote: dict[str, str]) -> None:
    """The DML node's ``WROTE`` entry, each role -> the name of the node that made its value."""
    made_by = {output: made.name for made in nodes for output in made.output}
    dml.metadata_props.add(key=WROTE, value=json.dumps({role: made_by[value] for role, value in wrote.items()}))


def _known_dims(dims: tuple, known: ValueType | None) -> tuple:
    """``dims``, with each unknown one taken from ``known`` (what shape inference knew) where that has it."""
    if known is None or known.rank != len(dims):
        return dims
    return tuple(d if d is not None else k for d, k in zip(dims, known.dims, strict=True))


def _declarations(body: Body) -> dict[str, onnx.ValueInfoProto]:
    """The values ``body`` gives a type: its inputs, outputs and value_info (a function: none)."""
    container = body.container
    if not isinstance(container, onnx.GraphProto):
        return {}
    return {v.name: v for v in (*container.input, *container.output, *container.value_info)}


def _record(body: Body, declared: dict[str, onnx.ValueInfoProto], typed: dict[str, ValueType]) -> None:
    """Give ``body`` the types in ``typed``: a new ``value_info``, or the shape a declaration lacks (a graph input or
    output that declares no shape: the DML form works only at the rank it was made for). A function has neither."""
    container = body.container
    if not isinstance(container, onnx.GraphProto):
        return
    for name, value_type in typed.items():
        found = declared.get(name)
        if found is None:
            container.value_info.append(value_type.value_info(name))
            declared[name] = container.value_info[-1]
        elif found.type.HasField("tensor_type") and not found.type.tensor_type.HasField("shape"):
            found.type.tensor_type.shape.CopyFrom(value_type.value_info(name).type.tensor_type.shape)


def _emit_crop(emit: Emitter, data: str, indices: str, index_dims: tuple, axis: int, crop: Crop) -> str:
    """``data`` sliced to the sizes of ``indices`` on every dimension but ``axis`` (GatherElements is opset 11+)."""
    rank = len(index_dims)
    if crop == Crop.DYNAMIC:
        # Slice clamps its ends to the data's sizes: a huge end keeps the whole axis.
        keep_axis = [WHOLE_AXIS if d == axis else 0 for d in range(rank)]
        shape = emit.node("Shape", [indices], "indices_shape")
        ends = emit.node("Add", [shape, emit.constant(keep_axis, np.int64, "keep_axis")], "slice_ends")
    else:
        ends = emit.constant(
            [WHOLE_AXIS if d == axis else size for d, size in enumerate(index_dims)], np.int64, "slice_ends"
        )
    starts = emit.constant([0] * rank, np.int64, "slice_starts")
    return emit.node("Slice", [data, starts, ends], "slice_input")


def _import_domain(imports: object) -> None:
    if imports is not None and not any(o.domain == DOMAIN for o in imports):
        imports.append(helper.make_opsetid(DOMAIN, contract.DOMAIN_VERSION))


def convert(
    model: onnx.ModelProto,
    dimension_count: str | int = "auto",
    out_of_bounds: str = "directml",
    observation: Observer | None = None,
    keep_on_cpu: str | None = None,
    native_float16: bool = False,
    provider_failures: str = "raise",
    scatter_duplicates: str = "error",
) -> tuple[onnx.ModelProto, Report]:
    """``to_dml`` with a report of what was converted and what was left standard, and why."""
    semantics.check_out_of_bounds("to_dml", out_of_bounds)
    if scatter_duplicates not in DUPLICATE_MODES:
        raise UserError(f"scatter_duplicates must be one of {', '.join(DUPLICATE_MODES)}, got {scatter_duplicates!r}")
    if provider_failures not in PROVIDER_FAILURES:
        raise UserError(f"provider_failures must be one of {', '.join(PROVIDER_FAILURES)}, got {provider_failures!r}")
    contract.register_schemas()
    count = parse_dimension_count(dimension_count)
    if keep_on_cpu is not None and keep_on_cpu not in FEATURE_LEVELS:
        raise UserError(f"keep_on_cpu must be a feature level ({', '.join(FEATURE_LEVELS)}), got {keep_on_cpu!r}")
    result = onnx.ModelProto()
    result.CopyFrom(model)
    sort_topologically(result)
    level = None if keep_on_cpu is None else FEATURE_LEVELS[keep_on_cpu]
    carrying = contract.NATIVE_FLOAT16 if native_float16 else contract.CUSTOM_OPS
    analysis = Analysis(result, count, observation, level, carrying)
    converter = _Converter(result, analysis, out_of_bounds, provider_failures, scatter_duplicates)
    converter.report.before = count_ops(model)
    converter.run()
    converter.report.after = count_ops(result)
    return result, converter.report


def to_dml(
    model: onnx.ModelProto, dimension_count: str | int = "auto", out_of_bounds: str = "directml", **options: Any
) -> onnx.ModelProto:
    """``model`` with every standard gather DirectML can express, and every scatter ONNX Runtime's DirectML provider
    runs, in DML form; the others stay standard (``convert`` reports why), and one the provider fails raises
    ``ProviderFailure`` unless ``provider_failures="onnx"``. The parameters, ``convert``'s options among them:
    docs/semantics.md, "6.1 What to_dml does" (``onnx-gather docs semantics``).
    """
    return convert(model, dimension_count, out_of_bounds, **options)[0]
