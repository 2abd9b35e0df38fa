"""What ``to_dml`` put around a DML node that lowering can take away again: the leading ones it padded the data,
the indices and the output with, the Slice before GatherElements, a Cast pair carrying a type (``look_through``);
and the ranks of a DML node's values where a graph declares none (``complete``).

A DML node says which nodes ``to_dml`` wrote around it (``dml_plan.WROTE``): only those are taken away. A DML node
without that entry (converted before onnx-gather wrote it, or made by hand) has them recognised by their pattern
alone, as before."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import onnx

from onnx_gather.core import contract
from onnx_gather.core.sizes import Refusal, gather_sizes, output_rank
from onnx_gather.graphs.dml_plan import WHOLE_AXIS, WROTE
from onnx_gather.graphs.plumbing import DefUse
from onnx_gather.graphs.types import ValueType


def complete(types: dict[str, ValueType], node: onnx.NodeProto) -> None:
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
class Surroundings:
    """What lowering one DML node takes as its inputs and output, having looked through what ``to_dml`` added."""

    data: str  # the data for the standard op, with ``data_ones`` fewer leading ones than the DML input
    data_ones: int
    indices: str  # the indices, with ``index_ones`` fewer leading ones than the DML indices
    index_ones: int
    final: str  # the value the lowering produces, with ``unpadded`` fewer leading ones than the DML output
    unpadded: int = 0
    carried: int | None = None  # the element type the data had before a carrying Cast that is dropped
    crop_to: list[int] | None = None  # static DML output sizes, where the crop removes ones from the middle
    removals: list[tuple[onnx.NodeProto, str]] = field(default_factory=list)  # (node, the input it keeps)


def look_through(
    work: DefUse, types: dict[str, ValueType], node: onnx.NodeProto, axis: int, index_dimensions: int, mode: str
) -> Surroundings:
    """What ``to_dml`` put around ``node`` that lowering can take away: the leading ones of the data (at most
    ``axis`` of them) and of the indices (leaving ``index_dimensions``), the output's, and a carrying Cast pair."""
    gather, elements = node.op_type == "DmlGather", node.op_type == "DmlGatherElements"
    n = types[node.input[0]].rank
    around = Surroundings(node.input[0], 0, node.input[1], 0, node.output[0])
    wrote = _wrote(node)
    pad = _padding(work, node.input[0], "pad_input", wrote)
    if pad is not None and pad[1] <= axis:
        around.data, around.data_ones = pad[0].input[0], pad[1]
    pad_i = _padding(work, node.input[1], "pad_indices", wrote)
    if pad_i is not None and (elements or n - pad_i[1] >= index_dimensions):
        around.indices, around.index_ones = pad_i[0].input[0], pad_i[1]
    if elements and around.data_ones != around.index_ones:  # GatherElements needs equal ranks
        around.data, around.data_ones, around.indices, around.index_ones = node.input[0], 0, node.input[1], 0
    if gather and output_rank("Gather", n - around.data_ones, index_dimensions) > n:
        # The standard output has more than N dimensions: the crop removes ones from inside it, which is possible
        # with static sizes only.
        input_dims, indices_dims = types[node.input[0]].dims, types[node.input[1]].dims
        if all(isinstance(d, int) for d in (*input_dims, *indices_dims)):
            sizes = gather_sizes(input_dims, indices_dims, {"axis": axis, "index_dimensions": index_dimensions})
            if not isinstance(sizes, Refusal):
                around.crop_to = list(sizes)
        return around
    around.removals += [(pad[0], pad[0].input[0])] if around.data_ones else []
    around.removals += [(pad_i[0], pad_i[0].input[0])] if around.index_ones else []
    unpad = _unpadding(work, around.final, wrote)
    if unpad is not None:
        around.final, around.unpadded = unpad[0].output[0], unpad[1]
        around.removals.append((unpad[0], unpad[0].input[0]))
    carried = _carrying(work, types, [around.data], ["input"], around.final, wrote)
    if carried is not None:
        around.carried, casts = carried
        around.data, around.final = casts[0].input[0], casts[-1].output[0]
        around.removals += [(cast, cast.input[0]) for cast in casts]
    if elements and not mode.startswith("directml"):  # DirectML reads within the sliced tensor's memory
        index_dims = (types.get(around.indices) or types[node.input[1]]).dims
        cut = _ours(
            sliced_source(work, around.data, around.indices, index_dims, axis - around.data_ones), "slice_input", wrote
        )
        if cut is not None:
            around.data = cut.input[0]
            around.removals.append((cut, cut.input[0]))
    return around


@dataclass
class ScatterSurroundings:
    """What lowering one DML scatter takes as its inputs and output, having looked through what ``to_dml`` added:
    the leading ones of the data (with the output's: ``data_ones``), of the indices and of the updates (the lowering
    flattens both), and the Cast pairs carrying data, updates and output in another type."""

    data: str
    data_ones: int
    indices: str
    updates: str
    final: str
    carried: int | None = None
    removals: list[tuple[onnx.NodeProto, str]] = field(default_factory=list)


def look_through_scatter(
    work: DefUse, types: dict[str, ValueType], node: onnx.NodeProto, most_ones: int
) -> ScatterSurroundings:
    """What ``to_dml`` put around scatter ``node`` that lowering can take away; at most ``most_ones`` leading ones of
    the data (the dims before the axis, or before those the tuples address)."""
    wrote = _wrote(node)
    values = list(node.input[:3])
    around = ScatterSurroundings(*values[:1], 0, *values[1:], node.output[0])
    for position, role in ((1, "indices"), (2, "updates")):
        pad = _padding(work, values[position], f"pad_{role}", wrote)
        if pad is not None:
            values[position] = pad[0].input[0]
            around.removals.append((pad[0], pad[0].input[0]))
    pad, unpad = _padding(work, values[0], "pad_input", wrote), _unpadding(work, around.final, wrote)
    # the data's and the output's together: the output has its shape
    if pad is not None and unpad is not None and pad[1] <= most_ones and unpad[1] == pad[1]:
        values[0], around.data_ones, around.final = pad[0].input[0], pad[1], unpad[0].output[0]
        around.removals += [(pad[0], pad[0].input[0]), (unpad[0], unpad[0].input[0])]
    carried = _carrying(work, types, [values[0], values[2]], ["input", "updates"], around.final, wrote)
    if carried is not None:
        around.carried, casts = carried
        values[0], values[2], around.final = casts[0].input[0], casts[1].input[0], casts[2].output[0]
        around.removals += [(cast, cast.input[0]) for cast in casts]
    around.data, around.indices, around.updates = values
    return around


def _padding(work: DefUse, value: str, role: str, wrote: dict[str, str] | None) -> tuple[onnx.NodeProto, int] | None:
    """The ``Unsqueeze`` that ``to_dml`` wrote as ``role`` to make ``value``, and how many leading ones it adds."""
    pad = _ours(work.private_producer(value), role, wrote)
    count = None if pad is None else leading_ones(work, pad, "Unsqueeze")
    return None if count is None else (pad, count)


def _unpadding(work: DefUse, value: str, wrote: dict[str, str] | None) -> tuple[onnx.NodeProto, int] | None:
    """The ``Squeeze`` that ``to_dml`` wrote to take the leading ones off DML output ``value``, and how many."""
    unpad = _ours(work.sole_consumer(value), "unpad_output", wrote)
    count = None if unpad is None else leading_ones(work, unpad, "Squeeze")
    return None if count is None else (unpad, count)


def _carrying(
    work: DefUse,
    types: dict[str, ValueType],
    values: list[str],
    roles: list[str],
    final: str,
    wrote: dict[str, str] | None,
) -> tuple[int, list[onnx.NodeProto]] | None:
    """The type ``to_dml`` carried as another (``contract.CARRIERS``) and the Casts that did it: one making each of
    ``values`` (the DML node's carried inputs, ``roles``) from that type, and one from ``final`` back to it; None
    unless all are there."""
    casts = [_ours(work.private_producer(v), f"carry_{role}", wrote) for v, role in zip(values, roles, strict=True)]
    casts.append(_ours(work.sole_consumer(final), "carry_output", wrote))
    if not all(cast is not None and cast.op_type == "Cast" for cast in casts):
        return None
    sources = {types[cast.input[0]].elem_type if cast.input[0] in types else None for cast in casts[:-1]}
    source = sources.pop() if len(sources) == 1 else None
    carrier = contract.CARRIERS.get(source)
    if source is None or carrier is None or [c.attribute[0].i for c in casts] != [carrier] * len(values) + [source]:
        return None
    return source, casts


def _ours(found: onnx.NodeProto | None, role: str, wrote: dict[str, str] | None) -> onnx.NodeProto | None:
    """``found``, where it is the node ``to_dml`` wrote as ``role`` (without a ``WROTE`` entry: any node)."""
    return found if found is None or wrote is None or wrote.get(role) == found.name else None


def _wrote(node: onnx.NodeProto) -> dict[str, str] | None:
    """The nodes ``to_dml`` wrote around DML ``node``, by role, or None where it does not say (no ``WROTE`` entry).
    An entry that is not a JSON object of names names none."""
    text = next((entry.value for entry in node.metadata_props if entry.key == WROTE), None)
    if text is None:
        return None
    try:
        wrote = json.loads(text)
    except ValueError:
        return {}
    return wrote if isinstance(wrote, dict) else {}


def leading_ones(work: DefUse, node: onnx.NodeProto, op_type: str) -> int | None:
    """How many leading ones ``node`` adds or removes, if it is that kind of ``op_type`` node."""
    if node.op_type != op_type or node.domain not in ("", "ai.onnx"):
        return None
    axes_attribute = next((a for a in node.attribute if a.name == "axes"), None)
    if axes_attribute is not None:
        axes = list(axes_attribute.ints)
    elif len(node.input) == 2 and (found := work.constant(node.input[1])) is not None:
        axes = found.reshape(-1).tolist()
    else:
        return None
    return len(axes) if axes and axes == list(range(len(axes))) else None


def sliced_source(work: DefUse, value: str, indices: str, index_dims: tuple | None, axis: int) -> onnx.NodeProto | None:
    """The Slice ``to_dml`` puts before GatherElements (data cut to the indices' sizes off the axis), if
    ``value`` comes from one: the standard op reads only those positions, so it can take the data whole."""
    node = work.private_producer(value)
    if node is None or node.op_type != "Slice" or len(node.input) != 3:
        return None
    starts = work.constant(node.input[1])
    if starts is None or starts.any():
        return None

    def keep_axis(ends: np.ndarray) -> bool:
        return ends.ndim == 1 and ends.size > axis and ends[axis] >= WHOLE_AXIS

    ends = work.constant(node.input[2])
    if ends is not None:
        off_axis = [int(e) for d, e in enumerate(ends) if d != axis]
        static = index_dims is not None and off_axis == [s for d, s in enumerate(index_dims) if d != axis]
        return node if keep_axis(ends) and static else None
    add = work.private_producer(node.input[2])
    if add is None or add.op_type != "Add":
        return None
    shape = work.private_producer(add.input[0])
    offset = work.constant(add.input[1])
    if shape is None or shape.op_type != "Shape" or shape.input[0] != indices or offset is None:
        return None
    return node if keep_axis(offset) and not np.delete(offset, axis).any() else None
