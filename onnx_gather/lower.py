"""DML form back to standard ONNX, with the same semantics, so a converted model runs natively anywhere.

The rules, for each ``DmlGather`` and ``DmlGatherElements`` node:

1. Padding that ``to_dml`` added (a leading-ones ``Unsqueeze`` in front, a ``Squeeze`` behind, the
   ``Cast`` pairs that carry FLOAT16, BFLOAT16 and BOOL) is looked through and removed where nothing
   else uses it, so a round trip does not grow the graph.
2. The node becomes the standard op on what remains: the DML output is the standard output with
   leading ones (SPEC.md section 6), added back with ``Unsqueeze`` where anything needs them.
3. ``out_of_bounds``: ``error`` is the native op's own check; ``clamp`` is one ``Clip`` of the indices
   to ``[-size, size - 1]`` (the native op takes negative indices); ``zero`` also masks the output.
   Before opset 12, where ``Clip`` and ``Min`` take no integers, ``Less`` and ``Where`` do the same.
"""

from __future__ import annotations

import functools
from collections import Counter

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnx_gather import semantics
from onnx_gather.convert import CARRIERS, NodeChange, Report, count_ops
from onnx_gather.graph import DML_OP_TYPES, DOMAIN, Body, Emitter, Names, ValueType, bodies, value_types

# ONNX Runtime's Where has no kernel for these; they are masked as an exact wider or same-width type.
_WHERE_CARRIERS = {TensorProto.BOOL: TensorProto.UINT8, TensorProto.INT16: TensorProto.INT32,
                   TensorProto.UINT16: TensorProto.UINT32, TensorProto.UINT64: TensorProto.INT64,
                   TensorProto.BFLOAT16: TensorProto.FLOAT}  # fmt: skip
_NUMPY_INDEX_TYPES = {TensorProto.INT32: np.int32, TensorProto.INT64: np.int64, TensorProto.UINT32: np.uint32,
                      TensorProto.UINT64: np.uint64}  # fmt: skip


def _is_dml(node: onnx.NodeProto) -> bool:
    return node.domain == DOMAIN and node.op_type in DML_OP_TYPES


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
        index = self.producer.get(value)
        if index is None:
            return None
        node = self.nodes[index]
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
        keep_axis = lambda ends: ends.ndim == 1 and ends.size > axis and ends[axis] >= 2**62  # noqa: E731
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

    def run(self) -> None:
        for body in reversed(bodies(self.model)):
            if any(_is_dml(node) for node in body.nodes):
                self._lower_body(body)
        if not any(_is_dml(node) for body in bodies(self.model) for node in body.nodes):
            for imports in (self.model.opset_import, *(f.opset_import for f in self.model.functions)):
                kept = [o for o in imports if o.domain != DOMAIN]
                del imports[:]
                imports.extend(kept)

    def _lower_body(self, body: Body) -> None:
        work = _Body(body, self.uses[body.scope])
        types = self.types.get(body.scope, {})
        replaced: dict[int, list[onnx.NodeProto]] = {}
        for index, node in enumerate(work.nodes):
            if _is_dml(node) and index not in work.removed:
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

    def _leave(self, work: _Body, node: onnx.NodeProto, reason: str) -> None:
        self.report.left.append(NodeChange(work.body.where, node.name, node.op_type, "", reason))

    def _lower(
        self, work: _Body, types: dict[str, ValueType], node: onnx.NodeProto, index: int
    ) -> list[onnx.NodeProto] | None:
        gather = node.op_type == "DmlGather"
        required = ("axis", "index_dimensions", "out_of_bounds") if gather else ("axis", "out_of_bounds")
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        missing = [name for name in required if name not in attributes]
        if missing:
            self._leave(work, node, f"attribute {missing[0]!r} is missing")
            return None
        axis = attributes["axis"]
        index_dimensions = attributes.get("index_dimensions", 0)
        mode = attributes["out_of_bounds"]
        mode = mode.decode() if isinstance(mode, bytes) else mode
        input_type, indices_type = types.get(node.input[0]), types.get(node.input[1])
        if input_type is None or input_type.rank is None or indices_type is None:
            self._leave(work, node, f"the rank of input {node.input[0]!r} is unknown (no shape information)")
            return None
        n = input_type.rank
        if mode not in semantics.OUT_OF_BOUNDS_MODES or not 0 <= axis < n or not 0 <= index_dimensions <= n:
            self._leave(work, node, f"its attributes are invalid for rank {n}: {attributes}")
            return None
        if mode != "error" and work.body.opset < 9:
            self._leave(work, node, f"out_of_bounds={mode} needs Where-9 (opset {work.body.opset})")
            return None

        name = node.name or self.names.fresh(f"{node.op_type[3:]}_{index}")
        emit = Emitter(work.body, self.names, name)
        # 1. Look through the padding and carrying in front.
        x, kx = node.input[0], 0
        pad = work.private_producer(x)
        if pad is not None and (count := work.leading_ones(pad, "Unsqueeze")) is not None and count <= axis:
            x, kx = pad.input[0], count
        i, ki = node.input[1], 0
        pad_i = work.private_producer(i)
        if pad_i is not None and (count := work.leading_ones(pad_i, "Unsqueeze")) is not None:
            i, ki = pad_i.input[0], count
        if gather and n - ki < index_dimensions:
            i, ki, pad_i = node.input[1], 0, None
        if not gather and kx != ki:
            x, kx, pad, i, ki, pad_i = node.input[0], 0, None, node.input[1], 0, None
        carried = None
        cast_in = work.private_producer(x)
        if cast_in is not None and cast_in.op_type == "Cast":
            source_type = types.get(cast_in.input[0])
            to = next(a.i for a in cast_in.attribute if a.name == "to")
            if source_type is not None and CARRIERS.get(source_type.elem_type) == to:
                carried = source_type.elem_type

        # 2. Look through the unpadding and carrying behind.
        out_rank = (n - kx) + index_dimensions - 1 if gather else n - kx
        if gather and kx < index_dimensions - 1:
            self._leave(work, node, "its output crop depends on sizes that are only known at run time")
            return None
        ones = n - out_rank  # the DML output is the standard output with this many leading ones
        final, unpadded, tail = node.output[0], 0, []
        unpad = work.sole_consumer(final)
        if unpad is not None and (count := work.leading_ones(unpad, "Squeeze")) is not None:
            final, unpadded, tail = unpad.output[0], count, [unpad]
        if carried is not None:
            cast_out = work.sole_consumer(final)
            back = cast_out is not None and cast_out.op_type == "Cast" and cast_out.attribute[0].i == carried
            if back:
                final, tail = cast_out.output[0], [*tail, cast_out]
            else:
                carried = None
        if carried is not None:
            x = cast_in.input[0]
            work.remove(cast_in, keep=x)
        for used in (pad if kx else None, pad_i if ki else None, *tail):
            if used is not None:
                work.remove(used, keep=used.input[0])
        if not gather and (cut := work.sliced_source(x, i, (types.get(i) or indices_type).dims, axis - kx)) is not None:
            x = cut.input[0]
            work.remove(cut, keep=x)

        # 3. The standard op, its indices fixed for the mode.
        data_type = carried if carried is not None else input_type.elem_type
        a = axis - kx
        i_std = emit.unpad(i, (n - ki) - index_dimensions, "unpad_indices") if gather else i
        size = input_type.dims[axis]
        fixed, mask = _fix_indices(emit, x, i_std, indices_type.elem_type, a, size, mode)
        standard = "Gather" if gather else "GatherElements"
        padding = ones - unpadded
        result = final if padding == 0 and mask is None else self.names.fresh(f"{name}/output")
        emit.nodes.append(helper.make_node(standard, [x, fixed], [result], name=name, axis=a))
        if mask is not None:
            trailing = (n - kx) - a - 1 if gather else 0  # the mask lines up with the axis; leading dims broadcast
            if trailing:
                mask = emit.unsqueeze(mask, range(index_dimensions, index_dimensions + trailing), "mask_dims")
            where_type = _WHERE_CARRIERS.get(data_type, data_type)
            if where_type != data_type:
                result = emit.node("Cast", [result], "carry_for_where", to=where_type)
            zero = emit.constant(0, helper.tensor_dtype_to_np_dtype(where_type), "zero")
            masked = final if padding == 0 and where_type == data_type else None
            result = emit.node("Where", [mask, result, zero], "zero_out_of_bounds", masked)
            if where_type != data_type:
                result = emit.node("Cast", [result], "carry_back", final if padding == 0 else None, to=data_type)
        if padding > 0:
            emit.pad(result, padding, "pad_output", final)
        elif padding < 0:
            emit.unpad(result, -padding, "unpad_output", final)
        self.report.changed.append(NodeChange(work.body.where, node.name, node.op_type, name, f"out_of_bounds={mode}"))
        return emit.nodes


class _Bounds:
    """The axis size and the clamping bounds as scalars of the index type, each built when first used."""

    def __init__(self, emit: Emitter, x: str, axis: int, size: int | str | None, index_type: int) -> None:
        self.emit, self.x, self.axis, self.static_size, self.index_type = emit, x, axis, size, index_type
        self.np_type = _NUMPY_INDEX_TYPES[index_type]

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
        if emit.opset >= 12:
            return emit.node("Clip", [indices, bounds.low, bounds.high], "clamp"), mask
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
    result = onnx.ModelProto()
    result.CopyFrom(model)
    lowering = _Lowering(result)
    lowering.report.before = count_ops(model)
    lowering.run()
    lowering.report.after = count_ops(result)
    return result, lowering.report


def to_onnx(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every DmlGather and DmlGatherElements rewritten into standard ONNX with the same results."""
    return lower(model)[0]
