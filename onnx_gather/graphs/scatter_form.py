"""Standard ``ScatterElements`` (and the deprecated ``Scatter``) and ``ScatterND`` in DML form, as ONNX Runtime's
DirectML provider maps them (docs/semantics.md section 10): what becomes of each scatter (``plan_scatter``) and the
nodes that stand for it (``emit_scatter``); ``convert`` calls both.

1. Only a scatter the provider runs on DirectML is converted: one of a version it has a kernel for
   (``ScatterElements`` 11, 13 and 16, ``Scatter`` 9 and 11, ``ScatterND`` 11, 13 and 16), of its types (INT64
   indices only for ``ScatterND``), without a reduction. The others stay standard, with the reason.
2. Data, indices and updates get leading ones to one dimension count N (the least the node needs, or the fixed
   ``dimension_count``); the output loses them again. ``DmlScatterNd`` counts the input's and the indices' own ranks.
3. FLOAT16 data and updates travel as FLOAT32, BOOL as UINT8, as the gathers' (exact: where a write lands does not
   depend on the element size, and DirectML drops a write past the output's elements whatever their type).
4. A ``ScatterElements`` DirectML refuses (``core.scatter.scatter_elements_refusal``: indices not the data's sizes
   off the axis, or larger on it; updates not the indices' dims) fails on DirectML
   (the session, at creation): ``convert`` raises ``ProviderFailure`` or, asked for ONNX's values, leaves it.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx
from onnx import helper

from onnx_gather.core import contract
from onnx_gather.core.contract import DOMAIN
from onnx_gather.core.scatter import SCATTER_MODES, scatter_elements_refusal
from onnx_gather.core.sizes import MAX_DIMENSION_COUNT
from onnx_gather.graphs.analysis import Left
from onnx_gather.graphs.emit import Emitter
from onnx_gather.graphs.plumbing import Body, attribute, referenced_attribute
from onnx_gather.graphs.types import ValueType

_ROLES = ("input", "indices", "updates")


@dataclass(frozen=True)
class ScatterPlan:
    """One standard scatter as DML form takes it."""

    op_type: str  # the DML op
    inputs: tuple[ValueType, ValueType, ValueType]  # data, indices, updates
    dimension_count: int
    attributes: dict[str, int]  # the DML op's, out_of_bounds aside
    carrier: int | None  # the element type data and updates travel as, where the bridge cannot carry theirs
    fails: str  # why the DirectML provider fails it ("" where it does not)

    @property
    def data(self) -> ValueType:
        return self.inputs[0]

    def ones(self, value: ValueType) -> int:
        """The leading ones ``value`` gets to N dimensions."""
        return self.dimension_count - len(value.dims)


def plan_scatter(
    body: Body,
    types: dict[str, ValueType],
    node: onnx.NodeProto,
    dimension_count: int | None,
    carrying: contract.Carrying,
    out_of_bounds: str,
    refusal: str,
) -> ScatterPlan | Left:
    """How DML form expresses scatter ``node``, or why it stays standard (``refusal``: why the provider leaves it to
    the CPU, "" where it does not)."""
    if refusal:
        return Left(f"kept standard, as the DirectML provider runs it on the CPU: {refusal}")
    if referenced := referenced_attribute(node):
        return Left(referenced)
    if out_of_bounds not in SCATTER_MODES:
        return Left(f"out_of_bounds {out_of_bounds!r} has no scatter form (one of {', '.join(SCATTER_MODES)})")
    if len(node.input) != 3 or len(node.output) != 1:
        return Left("it does not have exactly three inputs and one output")
    inputs = tuple(types.get(name) for name in node.input)
    for role, name, value_type in zip(_ROLES, node.input, inputs, strict=True):
        if value_type is None or value_type.rank is None:
            return Left(f"the rank of {role} {name!r} is unknown (no shape information)")
    data, indices, updates = inputs
    if data.elem_type not in carrying.node_types and data.elem_type not in carrying.carriers:
        return Left(f"{onnx.TensorProto.DataType.Name(data.elem_type)} data cannot be expressed for DirectML")
    op = contract.SCATTER_BY_STANDARD[node.op_type]
    if op.op_type == "DmlScatterNd":
        k = indices.dims[-1] if indices.dims else None
        if not isinstance(k, int) or not 1 <= k <= data.rank:
            return Left(f"its index tuples' length (the last dim of indices, {k or '?'}) is not 1 to the data's rank")
        least, fails = max(data.rank, indices.rank, updates.rank), ""
        attributes = {"input_dimension_count": data.rank, "indices_dimension_count": indices.rank}
    else:
        axis = attribute(node, "axis", 0) % data.rank
        refusal = scatter_elements_refusal(data.dims, indices.dims, updates.dims, axis)
        least, fails = data.rank, f"{refusal} (0x80070057)" if refusal else ""
        attributes = {"axis": axis}
    n = dimension_count or least
    if not least <= n <= MAX_DIMENSION_COUNT:
        return Left(f"it needs {least} dimensions, DML form here {n} (at most {MAX_DIMENSION_COUNT})")
    if "axis" in attributes:
        attributes["axis"] += n - least
    return ScatterPlan(op.op_type, inputs, n, attributes, carrying.carriers.get(data.elem_type), fails)


def emit_scatter(
    emit: Emitter, node: onnx.NodeProto, name: str, plan: ScatterPlan, modes: tuple[str, str], output: str
) -> tuple[onnx.NodeProto, dict[str, ValueType], dict[str, str]]:
    """Carry, pad -> the DML node, named ``name`` -> unpad, carry back, into ``node``'s output; the DML node's output
    is ``output``. Returns the DML node, the type of each value made, and what it wrote by role (``convert.WROTE``)."""
    carried = plan.carrier or plan.data.elem_type
    typed: dict[str, ValueType] = {}
    wrote: dict[str, str] = {}
    arguments = []
    for role, value, value_type in zip(_ROLES, node.input, plan.inputs, strict=True):
        element_type = value_type.elem_type if role == "indices" else carried
        if role != "indices" and plan.carrier is not None:
            value = wrote[f"carry_{role}"] = emit.node("Cast", [value], f"carry_{role}", to=plan.carrier)
            typed[value] = ValueType(carried, value_type.dims)
        if plan.ones(value_type):
            value = wrote[f"pad_{role}"] = emit.pad(value, plan.ones(value_type), f"pad_{role}")
        typed[value] = ValueType(element_type, (1,) * plan.ones(value_type) + value_type.dims)
        arguments.append(value)
    attributes = {**plan.attributes, "out_of_bounds": modes[0], "duplicates": modes[1]}
    dml = helper.make_node(plan.op_type, arguments, [output], name=name, domain=DOMAIN, **attributes)
    emit.nodes.append(dml)
    ones, dims = plan.ones(plan.data), plan.data.dims
    typed[output] = ValueType(carried, (1,) * ones + dims)
    y = output
    if ones:
        y = wrote["unpad_output"] = emit.unpad(y, ones, "unpad_output", None if plan.carrier else node.output[0])
        typed[y] = ValueType(carried, dims)
    if plan.carrier is not None:
        wrote["carry_output"] = emit.node("Cast", [y], "carry_output", node.output[0], to=plan.data.elem_type)
    typed[node.output[0]] = plan.data
    return dml, typed, wrote
