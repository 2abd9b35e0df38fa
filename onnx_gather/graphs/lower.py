"""DML form back to standard ONNX, with the same semantics, so a converted model runs natively anywhere.

The rules, for each ``DmlGather`` and ``DmlGatherElements`` node:

1. Padding that ``to_dml`` added (a leading-ones ``Unsqueeze`` in front, a ``Squeeze`` behind, the
   ``Cast`` pairs that carry FLOAT16, BFLOAT16 and BOOL) is looked through and removed where nothing
   else uses it, so a round trip does not grow the graph.
2. The node becomes the standard op on what remains: the DML output is the standard output with
   leading ones (docs/semantics.md section 6), added back with ``Unsqueeze`` where anything needs them.
3. ``out_of_bounds``: ``error`` is the native op's own check; ``clamp`` is one ``Clip`` of the indices
   to ``[-size, size - 1]`` (the native op takes negative indices); ``zero`` also masks the output.
   Before opset 12, where ``Clip`` and ``Min`` take no integers, ``Less`` and ``Where`` do the same.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnx_gather.core import contract, semantics
from onnx_gather.core.contract import DOMAIN
from onnx_gather.graphs.convert import WHOLE_AXIS, NodeChange, Report, count_ops
from onnx_gather.graphs.graph import (
    Body,
    Emitter,
    Initializers,
    Names,
    ValueType,
    bodies,
    prune_initializers,
    value_types,
)
from onnx_gather.graphs.lower_directml import MIN_OPSET, directml_gather, directml_gather_nd
from onnx_gather.graphs.order import sort_topologically


def _use_counts(model: onnx.ModelProto) -> dict[int, Counter]:
    """How often each value is used per scope: by nodes (subgraphs included) and as a graph output."""
    uses: dict[int, Counter] = {}
    for body in bodies(model):
        counter = uses.setdefault(body.scope, Counter())
        for node in body.nodes:
            counter.update(name for name in node.input if name)
        outputs = body.container.output
        counter.update(o if isinstance(o, str) else o.name for o in outputs)
    return uses


class _Body:
    """One node list being lowered: who produces what, and which nodes the lowering removes."""

    def __init__(self, body: Body, uses: Counter) -> None:
        self.body = body
        self.nodes = list(body.nodes)
        self.uses = uses
        self.producer = {out: index for index, node in enumerate(self.nodes) for out in node.output}
        self.consumers: dict[str, list[int]] = {}
        for index, node in enumerate(self.nodes):
            for name in node.input:
                self.consumers.setdefault(name, []).append(index)
        self.position = {id(node): index for index, node in enumerate(self.nodes)}
        self.removed: set[int] = set()
        self.initializers = (
            {t.name: t for t in body.container.initializer} if isinstance(body.container, onnx.GraphProto) else {}
        )

    def made_by(self, value: str) -> onnx.NodeProto | None:
        """The node of this list that makes ``value``, if one does."""
        index = self.producer.get(value)
        return None if index is None else self.nodes[index]

    def private_producer(self, value: str) -> onnx.NodeProto | None:
        """The node producing ``value`` here, if ``value`` has no other use."""
        index = self.producer.get(value)
        if index is None or index in self.removed or self.uses[value] != 1:
            return None
        return self.nodes[index]

    def sole_consumer(self, value: str) -> onnx.NodeProto | None:
        indices = self.consumers.get(value, [])
        if self.uses[value] != 1 or len(indices) != 1 or indices[0] in self.removed:
            return None
        return self.nodes[indices[0]]

    def constant(self, value: str) -> np.ndarray | None:
        if value in self.initializers:
            return numpy_helper.to_array(self.initializers[value])
        node = self.made_by(value)
        if node is None:
            return None
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.attribute) != 1:
            return None
        attribute = node.attribute[0]
        if attribute.name == "value":
            return numpy_helper.to_array(attribute.t)
        if attribute.name == "value_ints":
            return np.array(attribute.ints, np.int64)
        return None

    def leading_ones(self, node: onnx.NodeProto, op_type: str) -> int | None:
        """How many leading ones ``node`` adds or removes, if it is that kind of ``op_type`` node."""
        if node.op_type != op_type or node.domain not in ("", "ai.onnx"):
            return None
        axes_attribute = next((a for a in node.attribute if a.name == "axes"), None)
        if axes_attribute is not None:
            axes = list(axes_attribute.ints)
        elif len(node.input) == 2 and (found := self.constant(node.input[1])) is not None:
            axes = found.reshape(-1).tolist()
        else:
            return None
        return len(axes) if axes and axes == list(range(len(axes))) else None

    def remove(self, node: onnx.NodeProto, keep: str) -> None:
        """Remove ``node`` and the helpers only it uses (axes, slice ends), but not what produces ``keep``."""
        stack = [node]
        while stack:
            current = stack.pop()
            self.removed.add(self.position[id(current)])
            for name in current.input:
                producer = None if name in (keep, "") else self.private_producer(name)
                if producer is not None and producer.op_type in ("Constant", "Shape", "Add"):
                    stack.append(producer)

    def sliced_source(self, value: str, indices: str, index_dims: tuple | None, axis: int) -> onnx.NodeProto | None:
        """The Slice ``to_dml`` puts before GatherElements (data cut to the indices' sizes off the axis), if
        ``value`` comes from one: the standard op reads only those positions, so it can take the data whole."""
        node = self.private_producer(value)
        if node is None or node.op_type != "Slice" or len(node.input) != 3:
            return None
        starts = self.constant(node.input[1])
        if starts is None or starts.any():
            return None

        def keep_axis(ends: np.ndarray) -> bool:
            return ends.ndim == 1 and ends.size > axis and ends[axis] >= WHOLE_AXIS

        ends = self.constant(node.input[2])
        if ends is not None:
            off_axis = [int(e) for d, e in enumerate(ends) if d != axis]
            static = index_dims is not None and off_axis == [s for d, s in enumerate(index_dims) if d != axis]
            return node if keep_axis(ends) and static else None
        add = self.private_producer(node.input[2])
        if add is None or add.op_type != "Add":
            return None
        shape = self.private_producer(add.input[0])
        offset = self.constant(add.input[1])
        if shape is None or shape.op_type != "Shape" or shape.input[0] != indices or offset is None:
            return None
        return node if keep_axis(offset) and not np.delete(offset, axis).any() else None


class _Lowering:
    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.names = Names(model)
        self.types = value_types(model)
        self.uses = _use_counts(model)
        self.report = Report()
        self.initializers = Initializers(model.graph, self.names)

    def run(self) -> None:
        for body in reversed(bodies(self.model)):
            if any(contract.is_dml(node) for node in body.nodes):
                self._lower_body(body)
        prune_initializers(self.model, self.initializers)
        if not any(contract.is_dml(node) for body in bodies(self.model) for node in body.nodes):
            for imports in (self.model.opset_import, *(f.opset_import for f in self.model.functions)):
                kept = [o for o in imports if o.domain != DOMAIN]
                del imports[:]
                imports.extend(kept)

    def _lower_body(self, body: Body) -> None:
        work = _Body(body, self.uses[body.scope])
        types = self.types.get(body.scope, {})
        replaced: dict[int, list[onnx.NodeProto]] = {}
        for index, node in enumerate(work.nodes):
            if contract.is_dml(node) and index not in work.removed:
                _complete(types, node)
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

    def _leave(self, work: _Body, node: onnx.NodeProto, reason: str) -> None:
        self.report.left.append(NodeChange(work.body.where, node.name, node.op_type, "", reason))

    def _lower(
        self, work: _Body, types: dict[str, ValueType], node: onnx.NodeProto, index: int
    ) -> list[onnx.NodeProto] | None:
        if node.op_type == "DmlGatherNd":
            return self._lower_nd(work, types, node, index)
        attributes = self._attributes(work, types, node)
        if attributes is None:
            return None
        axis, index_dimensions, mode = attributes
        gather = node.op_type == "DmlGather"
        input_type, indices_type = types[node.input[0]], types[node.input[1]]
        plan = _look_through(work, types, node, axis, index_dimensions, mode)
        if plan.crop_to is None and gather and plan.kx < index_dimensions - 1:
            self._leave(work, node, "its output crop depends on sizes that are only known at run time")
            return None
        for used, keep in plan.removals:
            work.remove(used, keep)

        name = node.name or self.names.fresh(f"{node.op_type[3:]}_{index}")
        emit = self._emitter(work.body, name)
        n, a = input_type.rank, axis - plan.kx
        i = emit.unpad(plan.i, (n - plan.ki) - index_dimensions, "unpad_indices") if gather else plan.i
        data_type = plan.carried if plan.carried is not None else input_type.elem_type
        in_bounds = _in_bounds(work.constant(plan.i), input_type.dims[axis : axis + 1])
        directml = mode.startswith("directml") and not in_bounds
        mask = None
        if in_bounds:  # every mode reads what the native op reads
            fixed = _native_indices(emit, i, indices_type.elem_type)
        elif not directml:
            fixed, mask = _fix_indices(emit, plan.x, i, indices_type.elem_type, a, input_type.dims[axis], mode)
        # The DML output is the standard output with leading ones: ``padding`` more than the consumer keeps.
        out_rank = (n - plan.kx) + index_dimensions - 1 if gather else n - plan.kx
        padding = n - out_rank - plan.unpadded
        reshaped = padding != 0 or plan.crop_to is not None
        result = self.names.fresh(f"{name}/output") if reshaped or mask is not None else plan.final
        if directml:
            index_rank = index_dimensions if gather else n - plan.kx
            directml_gather(
                emit, plan.x, input_type.dims[plan.kx :], i, indices_type.elem_type, a, index_rank, gather, data_type,
                mode, result,
            )  # fmt: skip
        else:
            emit.nodes.append(
                helper.make_node("Gather" if gather else "GatherElements", [plan.x, fixed], [result], name=name, axis=a)
            )
        if mask is not None:
            trailing = (n - plan.kx) - a - 1 if gather else 0  # the mask lines up with the axis; leading dims broadcast
            if trailing:
                mask = emit.unsqueeze(mask, range(index_dimensions, index_dimensions + trailing), "mask_dims")
            result = _zero_where(emit, mask, result, data_type, None if reshaped else plan.final)
        return self._finish(emit, work, node, name, mode, result, padding, plan)

    def _lower_nd(
        self, work: _Body, types: dict[str, ValueType], node: onnx.NodeProto, index: int
    ) -> list[onnx.NodeProto] | None:
        """DmlGatherNd as GatherND on the inputs without their irrelevant leading ones."""
        found = self._nd_attributes(work, types, node)
        if found is None:
            return None
        inc, idc, batch, k, mode = found
        input_type, indices_type = types[node.input[0]], types[node.input[1]]
        n = input_type.rank
        plan = _look_through(work, types, node, n - inc, idc, mode)
        for used, keep in plan.removals:
            work.remove(used, keep)
        name = node.name or self.names.fresh(f"GatherNd_{index}")
        emit = self._emitter(work.body, name)
        x = emit.unpad(plan.x, (n - plan.kx) - inc, "unpad_input")
        i = emit.unpad(plan.i, (n - plan.ki) - idc, "unpad_indices")
        data_type = plan.carried if plan.carried is not None else input_type.elem_type
        padding = n - (idc - 1 + inc - batch - k) - plan.unpadded
        mask = None
        dims = input_type.dims[n - inc :]
        in_bounds = _in_bounds(work.constant(plan.i), dims[batch : batch + k]) or (
            batch == 0 and _mask_coordinates(work, types, plan.i, dims[:k])
        )
        masked = mode == "zero" and not in_bounds
        result = self.names.fresh(f"{name}/output") if padding != 0 or masked else plan.final
        if mode.startswith("directml") and not in_bounds:
            directml_gather_nd(emit, x, dims, i, indices_type.elem_type, idc, batch, k, data_type, mode, result)
        else:
            if in_bounds:  # every mode reads what the native op reads
                fixed = _native_indices(emit, i, indices_type.elem_type, (TensorProto.INT64,))
            else:
                fixed, mask = _fix_tuples(emit, x, i, indices_type.elem_type, batch, k, mode)
            attributes = {"batch_dims": batch} if batch else {}
            emit.nodes.append(helper.make_node("GatherND", [x, fixed], [result], name=name, **attributes))
        if mask is not None:
            trailing = inc - batch - k  # the mask is one per tuple; the slice each reads broadcasts
            if trailing:
                mask = emit.unsqueeze(mask, range(idc - 1, idc - 1 + trailing), "mask_dims")
            result = _zero_where(emit, mask, result, data_type, None if padding else plan.final)
        return self._finish(emit, work, node, name, mode, result, padding, plan)

    def _finish(
        self, emit: Emitter, work: _Body, node: onnx.NodeProto, name: str, mode: str, result: str, padding: int,
        plan: _Plan,
    ) -> list[onnx.NodeProto]:  # fmt: skip
        """``result`` into ``plan.final``: cropped, or with ``padding`` leading ones added (or taken away); reported."""
        if plan.crop_to is not None:
            emit.node(
                "Reshape", [result, emit.constant(plan.crop_to, np.int64, "output_sizes")], "crop_output", plan.final
            )
        elif padding > 0:
            emit.pad(result, padding, "pad_output", plan.final)
        elif padding < 0:
            emit.unpad(result, -padding, "unpad_output", plan.final)
        self.report.changed.append(NodeChange(work.body.where, node.name, node.op_type, name, f"out_of_bounds={mode}"))
        return emit.nodes

    def _nd_attributes(
        self, work: _Body, types: dict[str, ValueType], node: onnx.NodeProto
    ) -> tuple[int, int, int, int, str] | None:
        """DmlGatherNd's dimension counts, batch count, tuple length and mode, if valid, else None (reported)."""
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
            valid = (1 <= input_count <= n and 1 <= indices_count <= n
                     and 0 <= batch < min(input_count, indices_count) and 1 <= k <= input_count - batch)  # fmt: skip
            if mode not in contract.ATTRIBUTE_VALUES or not valid:
                reason = f"its attributes are invalid for rank {n} and tuples of {k}: {attributes}"
            elif work.body.opset < (12 if batch else MIN_OPSET):
                reason = f"GatherND{' with batch_dims' if batch else ''} needs opset {12 if batch else 11}"
            else:
                return input_count, indices_count, batch, k, mode
        self._leave(work, node, reason)
        return None

    def _attributes(
        self, work: _Body, types: dict[str, ValueType], node: onnx.NodeProto
    ) -> tuple[int, int, str] | None:
        """``axis``, ``index_dimensions`` and ``out_of_bounds``, if present and valid, else None (reported)."""
        attributes, mode, reason = _read_attributes(types, node)
        if reason is None:
            axis, index_dimensions = attributes["axis"], attributes.get("index_dimensions", 0)
            n = types[node.input[0]].rank
            if mode not in contract.ATTRIBUTE_VALUES or not 0 <= axis < n or not 0 <= index_dimensions <= n:
                reason = f"its attributes are invalid for rank {n}: {attributes}"
            elif mode.startswith("directml") and work.body.opset < MIN_OPSET:
                reason = f"out_of_bounds={mode} needs opset {MIN_OPSET} (Range, Mod; this is opset {work.body.opset})"
            elif mode != "error" and work.body.opset < 9:
                reason = f"out_of_bounds={mode} needs Where-9 (opset {work.body.opset})"
            else:
                return axis, index_dimensions, mode
        self._leave(work, node, reason)
        return None


def _read_attributes(types: dict[str, ValueType], node: onnx.NodeProto) -> tuple[dict, str, str | None]:
    """A DML node's attributes and its ``out_of_bounds`` mode, and why it cannot be lowered where one of
    ``required`` is missing or its input's rank is unknown (None where it can)."""
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    mode = attributes.get("out_of_bounds", "")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    missing = [name for name in contract.BY_TYPE[node.op_type].attribute_types() if name not in attributes]
    input_type, indices_type = types.get(node.input[0]), types.get(node.input[1])
    if missing:
        return attributes, mode, f"attribute {missing[0]!r} is missing"
    if input_type is None or input_type.rank is None or indices_type is None:
        return attributes, mode, f"the rank of input {node.input[0]!r} is unknown (no shape information)"
    return attributes, mode, None


def _complete(types: dict[str, ValueType], node: onnx.NodeProto) -> None:
    """Give both inputs of DML ``node`` a rank where any of its three values has one: they all have N dimensions
    (to_dml types them all, but a graph input or output may declare no shape)."""
    known = [types.get(name) for name in (*node.input[:2], *node.output[:1])]
    rank = next((t.rank for t in known if t is not None and t.rank is not None), None)
    if rank is None:
        return
    data_type = next((t.elem_type for t in (known[0], known[2]) if t is not None and t.elem_type), None)
    for name, value_type, elem_type in zip(node.input[:2], known, (data_type, None), strict=False):
        if value_type is None or value_type.rank is None:
            elem_type = elem_type if value_type is None or not value_type.elem_type else value_type.elem_type
            if elem_type:
                types[name] = ValueType(elem_type, (None,) * rank)


@dataclass
class _Plan:
    """What lowering one DML node takes as its inputs and output, having looked through what ``to_dml`` added."""

    x: str  # the data for the standard op, with ``kx`` fewer leading ones than the DML input
    kx: int
    i: str  # the indices, with ``ki`` fewer leading ones than the DML indices
    ki: int
    final: str  # the value the lowering produces, with ``unpadded`` fewer leading ones than the DML output
    unpadded: int = 0
    carried: int | None = None  # the element type the data had before a carrying Cast that is dropped
    crop_to: list[int] | None = None  # static DML output sizes, where the crop removes ones from the middle
    removals: list[tuple[onnx.NodeProto, str]] = field(default_factory=list)  # (node, the input it keeps)


def _look_through(
    work: _Body, types: dict[str, ValueType], node: onnx.NodeProto, axis: int, index_dimensions: int, mode: str
) -> _Plan:
    """What ``to_dml`` put around ``node`` that lowering can take away: the leading ones of the data (at most
    ``axis`` of them) and of the indices (leaving ``index_dimensions``), the output's, and a carrying Cast pair."""
    gather, elements = node.op_type == "DmlGather", node.op_type == "DmlGatherElements"
    n = types[node.input[0]].rank
    plan = _Plan(node.input[0], 0, node.input[1], 0, node.output[0])
    pad = work.private_producer(node.input[0])
    if pad is not None and (count := work.leading_ones(pad, "Unsqueeze")) is not None and count <= axis:
        plan.x, plan.kx = pad.input[0], count
    pad_i = work.private_producer(node.input[1])
    if pad_i is not None and (count := work.leading_ones(pad_i, "Unsqueeze")) is not None:
        if elements or n - count >= index_dimensions:
            plan.i, plan.ki = pad_i.input[0], count
    if elements and plan.kx != plan.ki:  # GatherElements needs equal ranks
        plan.x, plan.kx, plan.i, plan.ki = node.input[0], 0, node.input[1], 0
    if gather and plan.kx < index_dimensions - 1:
        # The crop removes ones from inside the standard output: possible with static sizes only.
        input_dims, indices_dims = types[node.input[0]].dims, types[node.input[1]].dims
        if all(isinstance(d, int) for d in (*input_dims, *indices_dims)):
            try:
                plan.crop_to = list(semantics.gather_output_sizes(input_dims, indices_dims, axis, index_dimensions))
            except semantics.GatherError:
                pass
        return plan
    plan.removals += [(pad, pad.input[0])] if plan.kx else []
    plan.removals += [(pad_i, pad_i.input[0])] if plan.ki else []
    unpad = work.sole_consumer(plan.final)
    if unpad is not None and (count := work.leading_ones(unpad, "Squeeze")) is not None:
        plan.final, plan.unpadded = unpad.output[0], count
        plan.removals.append((unpad, unpad.input[0]))
    cast_in = work.private_producer(plan.x)
    if cast_in is not None and cast_in.op_type == "Cast":
        source = types.get(cast_in.input[0])
        cast_out = work.sole_consumer(plan.final)
        if (
            source is not None
            and contract.CARRIERS.get(source.elem_type) == cast_in.attribute[0].i
            and cast_out is not None
            and cast_out.op_type == "Cast"
            and cast_out.attribute[0].i == source.elem_type
        ):
            plan.carried, plan.x, plan.final = source.elem_type, cast_in.input[0], cast_out.output[0]
            plan.removals += [(cast_in, cast_in.input[0]), (cast_out, cast_out.input[0])]
    if elements and not mode.startswith("directml"):  # DirectML reads within the sliced tensor's memory
        index_dims = (types.get(plan.i) or types[node.input[1]]).dims
        cut = work.sliced_source(plan.x, plan.i, index_dims, axis - plan.kx)
        if cut is not None:
            plan.x = cut.input[0]
            plan.removals.append((cut, cut.input[0]))
    return plan


def _zero_where(emit: Emitter, mask: str, result: str, data_type: int, output: str | None) -> str:
    """``result`` with 0 where ``mask`` is false, through a type ONNX Runtime's Where has a kernel for."""
    where_type = contract.WHERE_CARRIERS.get(data_type, data_type)
    if where_type != data_type:
        result = emit.node("Cast", [result], "carry_for_where", to=where_type)
    zero = emit.constant(0, helper.tensor_dtype_to_np_dtype(where_type), "zero")
    result = emit.node("Where", [mask, result, zero], "zero_out_of_bounds", output if where_type == data_type else None)
    if where_type != data_type:
        result = emit.node("Cast", [result], "carry_back", output, to=data_type)
    return result


class _Bounds:
    """The axis size and the clamping bounds as scalars of the index type, each built when first used."""

    def __init__(self, emit: Emitter, x: str, axis: int, size: int | str | None, index_type: int) -> None:
        self.emit, self.x, self.axis, self.static_size, self.index_type = emit, x, axis, size, index_type
        self.np_type = helper.tensor_dtype_to_np_dtype(index_type)

    @functools.cached_property
    def size(self) -> str:
        if isinstance(self.static_size, int):
            return self.emit.constant(self.static_size, self.np_type, "size")
        emit = self.emit
        shape = emit.node("Shape", [self.x], "data_shape")
        size = emit.squeeze(emit.slice(shape, self.axis, self.axis + 1, "axis_size"), [0], "size")
        return (
            size if self.index_type == TensorProto.INT64 else emit.node("Cast", [size], "size_cast", to=self.index_type)
        )

    @functools.cached_property
    def high(self) -> str:
        if isinstance(self.static_size, int):
            return self.emit.constant(max(self.static_size - 1, 0), self.np_type, "high")
        return self.emit.node("Sub", [self.size, self.emit.constant(1, self.np_type, "one")], "high")

    @functools.cached_property
    def low(self) -> str:
        if isinstance(self.static_size, int):
            return self.emit.constant(-self.static_size, self.np_type, "low")
        return self.emit.node("Neg", [self.size], "low")


def _in_bounds(indices: np.ndarray | None, sizes: Sequence[int | str | None]) -> bool:
    """Constant ``indices`` whose every value (every coordinate of a tuple, for several ``sizes``) lies inside its
    axis, whose size the model states: such a gather is in bounds on every run, whatever the mode says."""
    if indices is None or indices.dtype.kind not in "iu" or not all(isinstance(size, int) for size in sizes):
        return False
    if len(sizes) > 1 and (indices.ndim == 0 or indices.shape[-1] != len(sizes)):
        return False
    if indices.dtype == np.uint64 and bool((indices >= 2**63).any()):
        return False  # beyond every size (and beyond INT64)
    limits = np.array(sizes, np.int64)
    low = -limits if indices.dtype.kind == "i" else np.zeros_like(limits)
    values = indices.astype(np.int64)
    return bool(np.all((low <= values) & (values < limits)))


def _mask_coordinates(work: _Body, types: dict[str, ValueType], indices: str, dims: Sequence[int | str | None]) -> bool:
    """``indices`` = Transpose(NonZero(mask)) of a mask whose dims are ``dims`` (the same numbers or the same symbols):
    coordinates of elements of a tensor of those dims, in bounds on every run (``x[mask]`` as exporters write it)."""
    transpose = work.made_by(indices)
    if transpose is None or transpose.op_type != "Transpose" or transpose.domain not in ("", "ai.onnx"):
        return False
    perm = next((list(a.ints) for a in transpose.attribute if a.name == "perm"), [1, 0])
    nonzero = work.made_by(transpose.input[0])
    if perm != [1, 0] or nonzero is None or nonzero.op_type != "NonZero" or nonzero.domain not in ("", "ai.onnx"):
        return False
    mask = types.get(nonzero.input[0])
    return mask is not None and mask.dims is not None and None not in dims and tuple(mask.dims) == tuple(dims)


def _native_indices(
    emit: Emitter, indices: str, index_type: int, taken: tuple[int, ...] = (TensorProto.INT32, TensorProto.INT64)
) -> str:
    """Indices as the native op takes them: Gather and GatherElements INT32 or INT64, GatherND INT64 only."""
    if index_type in taken:
        return indices
    return emit.node("Cast", [indices], "as_int64", to=TensorProto.INT64)


def _fix_indices(
    emit: Emitter, x: str, indices: str, index_type: int, axis: int, size: int | str | None, mode: str
) -> tuple[str, str | None]:
    """Indices the native op takes (INT32 or INT64) with DML's meaning, and for ``zero`` the in-bounds mask."""
    signed = index_type in (TensorProto.INT32, TensorProto.INT64)
    if mode == "error" and signed:
        return indices, None  # the native op refuses out-of-bounds indices itself
    bounds = _Bounds(emit, x, axis, size, index_type)
    mask = None
    if mode == "zero":
        mask = emit.node("Less", [indices, bounds.size], "below_size")
        if signed:
            not_below_low = emit.node("Not", [emit.node("Less", [indices, bounds.low], "below_low")], "not_below_low")
            mask = emit.node("And", [mask, not_below_low], "in_bounds")
    if signed:  # clamp into [-size, size - 1]: the native op takes the negative ones
        if emit.opset >= 12 and index_type == TensorProto.INT32:
            return emit.node("Clip", [indices, bounds.low, bounds.high], "clamp"), mask
        if emit.opset >= 12:
            # ONNX Runtime 1.31's INT64 Clip leaves values beyond the int32 range unclamped (Clip(2^32 - 8, -6, 5)
            # gives 2^32 - 8). DOUBLE keeps every value's order against the bounds, and the clamped ones exactly.
            as_double = [emit.node("Cast", [v], f"{step}_double", to=TensorProto.DOUBLE)
                         for v, step in ((indices, "indices"), (bounds.low, "low"), (bounds.high, "high"))]  # fmt: skip
            clamped = emit.node("Clip", as_double, "clamp_double")
            return emit.node("Cast", [clamped], "clamp", to=TensorProto.INT64), mask
        below = emit.node("Less", [indices, bounds.low], "below_low")
        raised = emit.node("Where", [below, bounds.low, indices], "clamp_low")
        inside = emit.node("Less", [raised, bounds.size], "below_size")
        return emit.node("Where", [inside, raised, bounds.high], "clamp"), mask
    # Unsigned: the native op takes only signed indices. Capped at size, an out-of-bounds index stays one.
    cap = bounds.size if mode == "error" else bounds.high
    if emit.opset >= 12:
        capped = emit.node("Min", [indices, cap], "cap")
    else:
        capped = emit.node("Where", [emit.node("Less", [indices, cap], "below_cap"), indices, cap], "cap")
    return emit.node("Cast", [capped], "as_int64", to=TensorProto.INT64), mask


def lower(model: onnx.ModelProto) -> tuple[onnx.ModelProto, Report]:
    """``to_onnx`` with a report of what was lowered and what could not be."""
    contract.register_schemas()
    result = onnx.ModelProto()
    result.CopyFrom(model)
    sort_topologically(result)
    lowering = _Lowering(result)
    lowering.report.before = count_ops(model)
    lowering.run()
    lowering.report.after = count_ops(result)
    return result, lowering.report


def to_onnx(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every DmlGather, DmlGatherElements and DmlGatherNd rewritten into standard ONNX with the same results."""
    return lower(model)[0]


def _fix_tuples(
    emit: Emitter, x: str, indices: str, index_type: int, batch: int, k: int, mode: str
) -> tuple[str, str | None]:
    """INT64 index tuples GatherND takes with DML's meaning in ``mode`` (``error``, ``clamp``, ``zero``), and for
    ``zero`` the mask of tuples wholly in bounds."""
    v = indices if index_type == TensorProto.INT64 else emit.node("Cast", [indices], "as_int64", to=TensorProto.INT64)
    if index_type == TensorProto.UINT64:  # from 2^63 a value is negative as INT64: keep it out of bounds
        huge = emit.constant(2**63 - 1, np.int64, "huge")
        v = emit.node("Where", [emit.node("Less", [v, emit.constant(0, np.int64, "zero")], "wrapped"), huge, v], "v")
    if mode == "error":
        return v, None  # the native op refuses out-of-bounds tuples itself
    sizes = emit.slice(emit.node("Shape", [x], "data_shape"), batch, batch + k, "tuple_sizes")
    low = emit.node("Neg", [sizes], "low")
    mask = None
    if mode == "zero":
        outside = emit.node("Equal", [emit.node("Less", [v, sizes], "below_size"),
                                      emit.node("Less", [v, low], "below_low")], "outside")  # fmt: skip
        # An Or over the k coordinates (not a ReduceMax: ONNX Runtime 1.31 gives an empty one the wrong shape).
        coordinates = [emit.node("Gather", [outside, emit.constant(j, np.int64, f"j{j}")], f"outside{j}", axis=-1)
                       for j in range(k)]  # fmt: skip
        any_outside = functools.reduce(lambda a, b: emit.node("Or", [a, b], "any_outside"), coordinates)
        mask = emit.node("Not", [any_outside], "in_bounds")
    # Clamped through DOUBLE: ONNX Runtime 1.31's INT64 Min and Max are wrong beyond the int32 range.
    double = [emit.node("Cast", [value], f"{step}_double", to=TensorProto.DOUBLE)
              for value, step in ((v, "v"), (low, "low"), (emit.node("Sub", [sizes, emit.constant(1, np.int64, "one")],
                                                                      "high"), "high"))]  # fmt: skip
    clamped = emit.node("Max", [emit.node("Min", [double[0], double[2]], "below_high"), double[1]], "clamp_double")
    return emit.node("Cast", [clamped], "clamp", to=TensorProto.INT64), mask
