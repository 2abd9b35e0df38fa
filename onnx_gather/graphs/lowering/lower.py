"""DML form back to standard ONNX, with the same semantics, so a converted model runs natively anywhere.

The rules, for each ``DmlGather``, ``DmlGatherElements`` and ``DmlGatherNd`` node:

1. Padding that ``to_dml`` added (a leading-ones ``Unsqueeze`` in front, a ``Squeeze`` behind, the
   ``Cast`` pairs that carry FLOAT16, BFLOAT16 and BOOL) is looked through and removed where nothing
   else uses it, so a round trip does not grow the graph: the nodes the DML node names (``dml_plan.WROTE``), or
   where it has no such entry, those recognised by their pattern (``lowering.through``).
2. The node becomes the standard op on what remains: the DML output is the standard output with
   leading ones (docs/semantics.md section 6), added back with ``Unsqueeze`` where anything needs them.
3. ``out_of_bounds``: ``error`` is the native op's own check; ``clamp`` is one ``Clip`` of the indices
   to ``[-size, size - 1]`` (the native op takes negative indices); ``zero`` also masks the output.
   At opset 11, where ``Clip`` and ``Min`` take no integers, ``Less`` and ``Where`` do the same. ``directml`` (and
   ``directml-16bit``) reads an out-of-bounds index where DirectML reads it, beside the gathers that may meet one
   (``lowering.directml_reading``, ``lowering.dml_memory``).
4. Opsets: a Gather that is the native op alone keeps the model's opset; anything more is written at opset 11 (12
   for GatherND's batch dims and for capping unsigned indices). A model below what its nodes need is raised first
   (``graphs.opsets``, onnx's version converter); where it cannot be, the nodes are left with the reason, and
   ``to_onnx`` raises ``LoweringError`` naming them.
5. ``DmlScatterElements`` and ``DmlScatterNd``: the Unsqueeze, Squeeze and carrying Cast nodes ``to_dml`` wrote
   around them are taken away as in rule 1 (``through.look_through_scatter``), and the scatter becomes one
   ``ScatterElements`` on the flattened output at offsets computed as DirectML computes them, in each mode
   (``lowering.flat_scatter``; opset 11, 12 for ``clamp`` with unsigned indices).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnx_gather.core import contract, semantics
from onnx_gather.core.contract import DOMAIN
from onnx_gather.core.errors import UserError
from onnx_gather.core.form import DmlForm, FormError, dml_form
from onnx_gather.core.scatter import DUPLICATE_MODES, SCATTER_MODES
from onnx_gather.core.sizes import attribute_refusal
from onnx_gather.core.words import counted
from onnx_gather.graphs.changes import NodeChange, Report, count_ops
from onnx_gather.graphs.emit import Emitter, Initializers, prune_initializers
from onnx_gather.graphs.lowering.directml_reading import NativeGather, directml_reading
from onnx_gather.graphs.lowering.flat_scatter import NativeScatter, lower_scatter
from onnx_gather.graphs.lowering.native import (
    fix_indices,
    fix_tuples,
    indices_in_bounds,
    mask_coordinates,
    native_indices,
    zero_where,
)
from onnx_gather.graphs.lowering.through import Surroundings, complete, look_through, look_through_scatter
from onnx_gather.graphs.opsets import OpsetError, needed_opset, raise_opset, scatter_opset
from onnx_gather.graphs.plumbing import (
    Body,
    DefUse,
    Names,
    attribute,
    bodies,
    node_label,
    referenced_attribute,
    sort_topologically,
    use_counts,
)
from onnx_gather.graphs.types import ValueType, value_types

# What to_dml puts beside a DML node for it alone (axes, slice ends): removed with what it served.
_TO_DML_HELPERS = frozenset({"Constant", "Shape", "Add"})


class LoweringError(UserError):
    """``to_onnx`` cannot lower some DML node; the message names each, with the reason ``lower`` reports."""


@dataclasses.dataclass(frozen=True)
class _Gather:
    """One DmlGather or DmlGatherElements to lower: its attributes and types, what ``look_through`` found around it,
    the standard op's DML form (None where the DML output crops it), and whether its indices are known in bounds."""

    op_type: str  # the standard op: Gather or GatherElements
    axis: int  # the DML node's
    index_dimensions: int
    mode: str
    input_type: ValueType
    index_type: int
    around: Surroundings
    form: DmlForm | None
    in_bounds: bool

    @property
    def rank(self) -> int:  # the standard op's data rank
        return self.input_type.rank - self.around.data_ones

    @property
    def standard_axis(self) -> int:
        return self.axis - self.around.data_ones

    @property
    def index_rank(self) -> int:
        return self.index_dimensions if self.op_type == "Gather" else self.rank

    def needed(self) -> tuple[int, str]:
        """The opset its lowering needs (``needed_opset``), and why."""
        signed = self.index_type in (TensorProto.INT32, TensorProto.INT64)
        in_bounds = self.in_bounds or (self.mode == "error" and signed)
        needed = needed_opset(self.op_type, self.mode, in_bounds, self.index_type)
        return max(needed, (5, "its output crop needs Reshape-5")) if self.around.crop_to is not None else needed


class _Lowering:
    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.names = Names(model)
        self.types = value_types(model)
        self.uses = use_counts(model)
        self.report = Report()
        self.initializers = Initializers(model.graph, self.names)
        self.needs = 0  # the highest opset a node was left for, where only the opset stopped it
        self.opset_left: list[int] = []  # those nodes, by position in ``report.left``

    def run(self) -> None:
        for body in reversed(bodies(self.model)):
            if any(_is_dml(node) for node in body.nodes):
                self._lower_body(body)
        prune_initializers(self.model, self.initializers)
        if not any(_is_dml(node) for body in bodies(self.model) for node in body.nodes):
            for imports in (self.model.opset_import, *(f.opset_import for f in self.model.functions)):
                kept = [o for o in imports if o.domain != DOMAIN]
                del imports[:]
                imports.extend(kept)

    def _lower_body(self, body: Body) -> None:
        work = DefUse(body, self.uses[body.scope], self.model.ir_version)
        types = self.types.get(body.scope, {})
        replaced: dict[int, list[onnx.NodeProto]] = {}
        for index, node in enumerate(work.nodes):
            if _is_dml(node) and index not in work.removed:
                complete(types, node)
                lowered = self._lower(work, types, node, index)
                if lowered is not None:
                    replaced[index] = lowered
        rebuilt = []
        for index, node in enumerate(work.nodes):
            if index in replaced:
                rebuilt.extend(replaced[index])
            elif index not in work.removed:
                rebuilt.append(node)
        body.replace_nodes(rebuilt)
        vanished = {out for i in (*work.removed, *replaced) for out in work.nodes[i].output}
        vanished -= {out for node in rebuilt for out in node.output}
        if isinstance(body.container, onnx.GraphProto):
            kept = [v for v in body.container.value_info if v.name not in vanished]
            del body.container.value_info[:]
            body.container.value_info.extend(kept)

    def _emitter(self, body: Body, prefix: str) -> Emitter:
        """Constants become initializers of the main graph where the body sees them (and the IR version lets
        initializers stand alone), else shared Constant nodes."""
        shared = body.scope == 0 and self.model.ir_version >= 4
        return Emitter(
            body, self.names, prefix, share_constants=True, initializers=self.initializers if shared else None
        )

    def _leave(self, work: DefUse, node: onnx.NodeProto, reason: str) -> None:
        self.report.left.append(
            NodeChange(where=work.body.where, node=_named(work, node), op_type=node.op_type, result="", reason=reason)
        )

    def _lacks(self, work: DefUse, node: onnx.NodeProto, needed: tuple[int, str]) -> bool:
        """Whether the body's opset is below what lowering ``node`` needs (``needed_opset``); then it is left, and
        the opset noted for ``lower`` to raise."""
        version, why = needed
        if work.body.opset >= version:
            return False
        self.needs = max(self.needs, version)
        self.opset_left.append(len(self.report.left))
        self._leave(work, node, f"{why} (this is opset {work.body.opset})")
        return True

    def _lower(
        self, work: DefUse, types: dict[str, ValueType], node: onnx.NodeProto, index: int
    ) -> list[onnx.NodeProto] | None:
        if node.op_type == "DmlGatherNd":
            return self._lower_nd(work, types, node, index)
        if contract.is_dml_scatter(node):
            return self._lower_scatter(work, types, node, index)
        gather = self._plan(work, types, node)
        if gather is None or self._lacks(work, node, gather.needed()):
            return None
        for used, keep in gather.around.removals:
            work.remove(used, keep, _TO_DML_HELPERS)
        name = node.name or self.names.fresh(f"{node.op_type[3:]}_{index}")
        emit = self._emitter(work.body, name)
        result, padding = self._emit_gather(emit, gather, name)
        return self._finish(emit, work, node, name, gather.mode, result, padding, gather.around)

    def _plan(self, work: DefUse, types: dict[str, ValueType], node: onnx.NodeProto) -> _Gather | None:
        """What lowering a DmlGather or DmlGatherElements takes, or None where it cannot be lowered (reported)."""
        attributes = self._attributes(work, types, node)
        if attributes is None:
            return None
        axis, index_dimensions, mode = attributes
        op_type = "Gather" if node.op_type == "DmlGather" else "GatherElements"
        input_type, index_type = types[node.input[0]], types[node.input[1]].elem_type
        around = look_through(work, types, node, axis, index_dimensions, mode)
        n, rank = input_type.rank, input_type.rank - around.data_ones  # the DML rank, the standard op's data rank
        index_rank = index_dimensions if op_type == "Gather" else rank
        try:  # the standard op's DML form at the node's N: the leading ones to_dml gives it
            form = dml_form(op_type, rank, index_rank, axis - around.data_ones, dimension_count=n)
        except FormError:  # its output needs more than N dimensions: the DML output crops it (look_through)
            form = None
        if form is None and around.crop_to is None:
            self._leave(work, node, "its output crop depends on sizes that are only known at run time")
            return None
        in_bounds = indices_in_bounds(work.constant(around.indices), input_type.dims[axis : axis + 1])
        return _Gather(op_type, axis, index_dimensions, mode, input_type, index_type, around, form, in_bounds)

    def _emit_gather(self, emit: Emitter, gather: _Gather, name: str) -> tuple[str, int]:
        """The standard op and what it takes, emitted: its result and the leading ones ``_finish`` adds back."""
        around, input_type, index_type = gather.around, gather.input_type, gather.index_type
        indices = around.indices
        if gather.op_type == "Gather":
            unpad = input_type.rank - around.index_ones - gather.index_dimensions
            indices = emit.unpad(indices, unpad, "unpad_indices")
        data_type = around.carried if around.carried is not None else input_type.elem_type
        directml = gather.mode.startswith("directml") and not gather.in_bounds
        mask = None
        if gather.in_bounds:  # every mode reads what the native op reads
            fixed = native_indices(emit, indices, index_type)
        elif not directml:
            fixed, mask = fix_indices(
                emit, around.data, indices, index_type, gather.standard_axis, input_type.dims[gather.axis], gather.mode
            )
        # The DML output is the standard output with leading ones: ``padding`` more than the consumer keeps.
        padding = gather.form.output_ones - around.unpadded if gather.form is not None else 0
        reshaped = padding != 0 or around.crop_to is not None
        result = self.names.fresh(f"{name}/output") if reshaped or mask is not None else around.final
        if directml:
            dims = tuple(input_type.dims[around.data_ones :])
            directml_reading(
                emit,
                NativeGather(
                    gather.op_type,
                    around.data,
                    dims,
                    indices,
                    index_type,
                    gather.index_rank,
                    data_type,
                    gather.mode,
                    result,
                    axis=gather.standard_axis,
                ),
            )
        else:
            emit.nodes.append(
                helper.make_node(gather.op_type, [around.data, fixed], [result], name=name, axis=gather.standard_axis)
            )
        if mask is not None:
            # The mask lines up with the axis; leading dims broadcast.
            trailing = gather.rank - gather.standard_axis - 1 if gather.op_type == "Gather" else 0
            if trailing:
                dims_from = gather.index_dimensions
                mask = emit.unsqueeze(mask, range(dims_from, dims_from + trailing), "mask_dims")
            result = zero_where(emit, mask, result, data_type, None if reshaped else around.final)
        return result, padding

    def _lower_nd(
        self, work: DefUse, types: dict[str, ValueType], node: onnx.NodeProto, index: int
    ) -> list[onnx.NodeProto] | None:
        """DmlGatherNd as GatherND on the inputs without their irrelevant leading ones."""
        found = self._nd_attributes(work, types, node)
        if found is None:
            return None
        form, mode = found
        counts, batch, tuple_length = form.attributes, form.batch_dimension_count, form.tuple_length
        input_count, indices_count = counts["input_dimension_count"], counts["indices_dimension_count"]
        input_type, index_type = types[node.input[0]], types[node.input[1]].elem_type
        around = look_through(work, types, node, form.input_ones, indices_count, mode)
        if self._lacks(work, node, needed_opset("GatherND", mode, False, index_type, batch)):
            return None
        for used, keep in around.removals:
            work.remove(used, keep, _TO_DML_HELPERS)
        name = node.name or self.names.fresh(f"GatherNd_{index}")
        emit = self._emitter(work.body, name)
        data = emit.unpad(around.data, form.input_ones - around.data_ones, "unpad_input")
        indices = emit.unpad(around.indices, form.indices_ones - around.index_ones, "unpad_indices")
        data_type = around.carried if around.carried is not None else input_type.elem_type
        padding = form.output_ones - around.unpadded
        mask = None
        dims = tuple(input_type.dims[form.input_ones :])
        tuple_dims = dims[batch : batch + tuple_length]
        in_bounds = indices_in_bounds(work.constant(around.indices), tuple_dims) or (
            batch == 0 and mask_coordinates(work, types, around.indices, dims[:tuple_length])
        )
        masked = mode == "zero" and not in_bounds
        result = self.names.fresh(f"{name}/output") if padding != 0 or masked else around.final
        if mode.startswith("directml") and not in_bounds:
            directml_reading(
                emit,
                NativeGather(
                    "GatherND",
                    data,
                    dims,
                    indices,
                    index_type,
                    indices_count,
                    data_type,
                    mode,
                    result,
                    batch=batch,
                    tuple_length=tuple_length,
                ),
            )
        else:
            if in_bounds:  # every mode reads what the native op reads
                fixed = native_indices(emit, indices, index_type, (TensorProto.INT64,))
            else:
                fixed, mask = fix_tuples(emit, data, indices, index_type, batch, tuple_length, mode)
            attributes = {"batch_dims": batch} if batch else {}
            emit.nodes.append(helper.make_node("GatherND", [data, fixed], [result], name=name, **attributes))
        if mask is not None:
            trailing = input_count - batch - tuple_length  # the mask is one per tuple; the slice each reads broadcasts
            if trailing:
                mask = emit.unsqueeze(mask, range(indices_count - 1, indices_count - 1 + trailing), "mask_dims")
            result = zero_where(emit, mask, result, data_type, None if padding else around.final)
        return self._finish(emit, work, node, name, mode, result, padding, around)

    def _lower_scatter(
        self, work: DefUse, types: dict[str, ValueType], node: onnx.NodeProto, index: int
    ) -> list[onnx.NodeProto] | None:
        """DmlScatterElements or DmlScatterNd as one ScatterElements on the flat output (``lowering.flat_scatter``)."""
        attributes, mode, reason = _read_attributes(types, node)
        input_type, indices_type = types.get(node.input[0]), types.get(node.input[1])
        n = input_type.rank if reason is None else 0
        nd = node.op_type == "DmlScatterNd"
        first = n - attributes.get("input_dimension_count", 0) if nd else attributes.get("axis", -1)
        k = indices_type.dims[-1] if reason is None and nd and indices_type.rank else 0
        if reason is None and (invalid := _invalid(attributes, n, SCATTER_MODES)):
            reason = f"its attributes are invalid for rank {n}: {invalid}"
        elif reason is None and nd and not (isinstance(k, int) and 1 <= k <= n - first):
            reason = "the length of its index tuples (the last dim of its indices) is unknown or invalid"
        if reason is not None:
            self._leave(work, node, reason)
            return None
        if self._lacks(work, node, scatter_opset(mode, indices_type.elem_type)):
            return None
        around = look_through_scatter(work, types, node, first)
        for used, keep in around.removals:
            work.remove(used, keep, _TO_DML_HELPERS)
        name = node.name or self.names.fresh(f"{node.op_type[3:]}_{index}")
        emit = self._emitter(work.body, name)
        scatter = NativeScatter(
            node.op_type,
            around.data,
            tuple(input_type.dims[around.data_ones :]),
            around.indices,
            indices_type.elem_type,
            around.updates,
            mode,
            around.final,
            first - around.data_ones,
            k,
            attributes["duplicates"],
            types[around.data].elem_type if around.data in types else input_type.elem_type,
            not all(isinstance(d, int) and d > 0 for d in indices_type.dims[:-1]),
        )
        lower_scatter(emit, scatter)
        self._report(work, node, name, mode)
        return emit.nodes

    def _report(self, work: DefUse, node: onnx.NodeProto, name: str, mode: str) -> None:
        change = NodeChange(
            where=work.body.where, node=_named(work, node), op_type=node.op_type, result=name, out_of_bounds=mode
        )
        self.report.changed.append(change)

    def _finish(
        self,
        emit: Emitter,
        work: DefUse,
        node: onnx.NodeProto,
        name: str,
        mode: str,
        result: str,
        padding: int,
        around: Surroundings,
    ) -> list[onnx.NodeProto]:
        """``result`` into ``around.final``: cropped, or with ``padding`` leading ones added (or taken away);
        reported."""
        if around.crop_to is not None:
            sizes = emit.constant(around.crop_to, np.int64, "output_sizes")
            emit.node("Reshape", [result, sizes], "crop_output", around.final)
        elif padding > 0:
            emit.pad(result, padding, "pad_output", around.final)
        elif padding < 0:
            emit.unpad(result, -padding, "unpad_output", around.final)
        self._report(work, node, name, mode)
        return emit.nodes

    def _nd_attributes(
        self, work: DefUse, types: dict[str, ValueType], node: onnx.NodeProto
    ) -> tuple[DmlForm, str] | None:
        """The standard GatherND's DML form that DmlGatherNd's attributes and tuple length tell, and its mode, if valid,
        else None (reported)."""
        attributes, mode, reason = _read_attributes(types, node)
        input_type, indices_type = types.get(node.input[0]), types.get(node.input[1])
        if reason is None and indices_type.rank is None:
            reason = f"the rank of input {node.input[0]!r} is unknown (no shape information)"
        elif reason is None and not isinstance(indices_type.dims[-1], int):
            reason = "the length of its index tuples (the last dim of its indices) is unknown"
        elif reason is None:
            n, k = input_type.rank, indices_type.dims[-1]
            input_count, indices_count = attributes["input_dimension_count"], attributes["indices_dimension_count"]
            batch = attributes["batch_dimension_count"]
            invalid = _invalid(attributes, n)
            if not invalid:
                try:
                    return dml_form("GatherND", input_count, indices_count, 0, batch, k, dimension_count=n), mode
                except FormError as error:
                    invalid = str(error)
            reason = f"its attributes are invalid for rank {n} and tuples of {k}: {invalid}"
        self._leave(work, node, reason)
        return None

    def _attributes(
        self, work: DefUse, types: dict[str, ValueType], node: onnx.NodeProto
    ) -> tuple[int, int, str] | None:
        """``axis``, ``index_dimensions`` and ``out_of_bounds``, if present and valid, else None (reported)."""
        attributes, mode, reason = _read_attributes(types, node)
        if reason is None:
            axis, index_dimensions = attributes["axis"], attributes.get("index_dimensions", 0)
            n = types[node.input[0]].rank
            input_dims, indices_dims = types[node.input[0]].dims, types[node.input[1]].dims
            if invalid := _invalid(attributes, n):
                reason = f"its attributes are invalid for rank {n}: {invalid}"
            elif node.op_type == "DmlGather" and not semantics.plain_gather(
                input_dims, indices_dims, axis, index_dimensions
            ):
                reason = (
                    f"indices {indices_dims} and input {input_dims} are beyond ONNX's Gather (index sizes other "
                    "than 1 before the last index_dimensions, or a crop of input sizes other than 1): only "
                    "the custom ops compute what DirectML does there"
                )
            else:
                return axis, index_dimensions, mode
        self._leave(work, node, reason)
        return None


def _read_attributes(types: dict[str, ValueType], node: onnx.NodeProto) -> tuple[dict, str, str | None]:
    """A DML node's attributes and its ``out_of_bounds`` mode, and why it cannot be lowered where one of
    ``required`` is missing or its input's rank is unknown (None where it can)."""
    referenced = referenced_attribute(node)
    attributes = {a.name: attribute(node, a.name) for a in node.attribute if not a.ref_attr_name}
    mode = attributes.get("out_of_bounds", "")
    op = contract.BY_TYPE.get(node.op_type) or contract.SCATTER_BY_TYPE[node.op_type]
    missing = [name for name in op.attribute_types() if name not in attributes]
    input_type, indices_type = types.get(node.input[0]), types.get(node.input[1])
    if referenced:
        return attributes, mode, referenced
    if missing:
        return attributes, mode, f"attribute {missing[0]!r} is missing"
    if input_type is None or input_type.rank is None or indices_type is None:
        return attributes, mode, f"the rank of input {node.input[0]!r} is unknown (no shape information)"
    return attributes, mode, None


def _invalid(attributes: dict, n: int, modes: Sequence[str] = contract.ATTRIBUTE_VALUES) -> str | None:
    """Why a DML node's ``attributes`` are invalid for rank ``n``, as ``core`` states it: its ``out_of_bounds`` (one
    of ``modes``) and ``duplicates`` (``core.contract.mode_refusal``), its integers' ranges
    (``core.sizes.attribute_refusal``); None where they are valid."""
    duplicates = attributes.get("duplicates")
    refused = attribute_refusal({name: value for name, value in attributes.items() if isinstance(value, int)}, n)
    return (
        contract.mode_refusal(attributes.get("out_of_bounds", ""), modes=modes)
        or (contract.mode_refusal(duplicates, "duplicates", DUPLICATE_MODES) if duplicates is not None else None)
        or (refused.reason if refused is not None else None)
    )


def _is_dml(node: onnx.NodeProto) -> bool:
    """Whether ``node`` is one of the DML ops, a gather or a scatter."""
    return contract.is_dml(node) or contract.is_dml_scatter(node)


def _named(work: DefUse, node: onnx.NodeProto) -> str:
    """``node``'s name, or what reports call a node without one."""
    return node_label(node, work.position[id(node)])


def _lowered(model: onnx.ModelProto, raise_to: int = 0) -> tuple[onnx.ModelProto, _Lowering]:
    result = onnx.ModelProto()
    result.CopyFrom(model)
    if raise_to:
        raise_opset(result, raise_to)
    sort_topologically(result)
    lowering = _Lowering(result)
    lowering.run()
    return result, lowering


def _opsets_below(model: onnx.ModelProto, target: int) -> str:
    imports = [*model.opset_import, *(o for f in model.functions for o in f.opset_import)]
    versions = sorted({o.version for o in imports if o.domain in ("", "ai.onnx") and o.version < target})
    return " and ".join(str(v) for v in versions)


def lower(model: onnx.ModelProto) -> tuple[onnx.ModelProto, Report]:
    """``to_onnx`` with a report of what was lowered and what could not be.

    Where the default domain's opset lacks what some DML node's lowering needs (``needed_opset``), the model is
    raised to the highest opset needed with onnx's version converter (``graphs.opsets``) and lowered from the start
    again; the report notes it. Where the converter cannot, those nodes are left with its reason."""
    contract.register_schemas()
    result, lowering = _lowered(model)
    if lowering.needs:
        target, count = lowering.needs, len(lowering.opset_left)
        try:
            result, raised = _lowered(model, target)
        except OpsetError as error:
            for position in lowering.opset_left:
                left = lowering.report.left[position]
                lowering.report.left[position] = dataclasses.replace(left, reason=f"{left.reason}; {error}")
        else:
            raised.report.notes.append(
                f"default-domain opset raised from {_opsets_below(model, target)} to {target} with onnx's version "
                f"converter: lowering {counted(count, 'DML node')} needs it"
            )
            lowering = raised
    lowering.report.before = count_ops(model)
    lowering.report.after = count_ops(result)
    return result, lowering.report


def to_onnx(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every DmlGather, DmlGatherElements, DmlGatherNd, DmlScatterElements and DmlScatterNd rewritten into standard
    ONNX with the same results;
    ``LoweringError`` (naming each node and why, as ``lower`` reports it) where some cannot be."""
    result, report = lower(model)
    if report.left:
        details = "; ".join(left.describe() for left in report.left)
        raise LoweringError(f"cannot lower {counted(len(report.left), 'DML node')} into standard ONNX: {details}")
    return result
