"""One standard gather or scatter as DML form takes it (``DmlPlan``: ``graphs.analysis`` plans both kinds) and the
nodes that stand for it (``emit_dml``), the one pipeline ``convert`` writes both through:

data cropped (GatherElements only, rule 4 of ``convert``), data and updates carried as another type, every input
padded with leading ones -> the DML node -> its output unpadded and carried back, into the standard node's output.
The DML node names what was written around it (``WROTE``), for ``lowering.through``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import onnx
from onnx import helper

from onnx_gather.core import contract
from onnx_gather.core.contract import DOMAIN
from onnx_gather.core.form import DmlForm
from onnx_gather.graphs.emit import Emitter
from onnx_gather.graphs.placement.gather import Placement
from onnx_gather.graphs.types import ValueType

# An end past any size: Slice clamps it, so the slice keeps the whole axis (lowering.through recognises it).
WHOLE_AXIS = 2**62
# The key of a DML node's ``metadata_props`` entry naming the nodes ``to_dml`` wrote around it: a JSON object, each
# role it wrote (slice_input, carry_input, pad_input, pad_indices, carry_updates, pad_updates, unpad_output,
# carry_output) -> that node's name.
WROTE = f"{DOMAIN}.wrote"
ROLES = ("input", "indices", "updates")  # the DML node's inputs, as its schema names them


@dataclass(frozen=True)
class Left:
    """A gather or scatter DML form leaves as it is, and why (for the report, in words)."""

    reason: str
    fails: str = ""  # why ONNX Runtime's DirectML provider fails it all the same ("" where it does not)
    placement: Placement | None = None  # where the provider puts the gather, where its inputs' ranks are known


class Crop(StrEnum):
    """How GatherElements' data is cropped to its indices' sizes off the axis (DirectML takes equal sizes): by sizes
    known in the graph, or by the indices' ``Shape`` at run time."""

    STATIC = "static"
    DYNAMIC = "dynamic"


@dataclass(frozen=True)
class DmlPlan:
    """One standard gather or scatter as DML form takes it."""

    form: DmlForm  # the DML node's dimension count, the leading ones of its tensors, its attributes
    inputs: tuple[ValueType, ...]  # the standard node's: data, indices (a scatter's updates)
    output: ValueType  # the standard output's, its dims as far as they are known
    axis: int  # the standard node's, non-negative (GatherND and ScatterND: 0)
    carrier: int | None  # the element type data (and updates) travel as, where the bridge cannot carry theirs
    fails: str = ""  # why ONNX Runtime's DirectML provider fails it ("" where it does not)
    crop: Crop | None = None  # GatherElements data cropped to the indices' sizes off the axis; None: not needed
    placement: Placement | None = None  # where the provider puts the gather (None for a scatter)

    @property
    def op(self) -> str:
        """The standard op."""
        return self.form.op

    @property
    def op_type(self) -> str:
        """The DML op."""
        return (contract.BY_STANDARD.get(self.op) or contract.SCATTER_BY_STANDARD[self.op]).op_type

    @property
    def data(self) -> ValueType:
        return self.inputs[0]

    @property
    def indices(self) -> ValueType:
        return self.inputs[1]

    @property
    def batch(self) -> int:
        return self.form.batch_dimension_count

    @property
    def out_rank(self) -> int:
        return self.form.output_rank


def emit_dml(
    emit: Emitter, node: onnx.NodeProto, name: str, plan: DmlPlan, modes: dict[str, str]
) -> tuple[list[onnx.NodeProto], dict[str, ValueType]]:
    """Crop, carry, pad -> the DML node ``name`` (``modes``: its string attributes) -> unpad, carry back, ending in
    ``node``'s output.

    Returns the nodes and the type of every value they make, and of their inputs and output, with all that is known of
    their shapes: the lowering needs the DML node's ranks, and shape inference cannot see through the DML node, nor
    past a contrib operator in front of it."""
    form, carrier = plan.form, plan.carrier
    carried = carrier or plan.data.elem_type
    typed: dict[str, ValueType] = {}
    wrote: dict[str, str] = {}  # role -> the value its node makes
    arguments = []
    for role, value, value_type in zip(ROLES[: len(plan.inputs)], node.input, plan.inputs, strict=True):
        dims = value_type.dims
        if role == "input" and plan.crop is not None:
            value = wrote["slice_input"] = _emit_crop(emit, value, node.input[1], plan.indices.dims, plan)
            dims = tuple(d if k == plan.axis else plan.indices.dims[k] for k, d in enumerate(dims))
            typed[value] = ValueType(value_type.elem_type, dims)
        if role != "indices" and carrier is not None:
            value = wrote[f"carry_{role}"] = emit.node("Cast", [value], f"carry_{role}", to=carrier)
            typed[value] = ValueType(carried, dims)
        if ones := form.ones(value_type.rank):
            value = wrote[f"pad_{role}"] = emit.pad(value, ones, f"pad_{role}")
        typed[value] = ValueType(value_type.elem_type if role == "indices" else carried, (1,) * ones + dims)
        arguments.append(value)
    final, dims = node.output[0], plan.output.dims
    output = final if form.output_ones == 0 and carrier is None else emit.names.fresh(f"{name}/output")
    dml = helper.make_node(plan.op_type, arguments, [output], name=name, domain=DOMAIN, **form.attributes, **modes)
    emit.nodes.append(dml)
    typed[output] = ValueType(carried, (1,) * form.output_ones + dims)
    if form.output_ones:
        output = wrote["unpad_output"] = emit.unpad(
            output, form.output_ones, "unpad_output", None if carrier else final
        )
        typed[output] = ValueType(carried, dims)
    if carrier is not None:
        wrote["carry_output"] = emit.node("Cast", [output], "carry_output", final, to=plan.data.elem_type)
    typed[final] = plan.output
    made_by = {value: made.name for made in emit.nodes for value in made.output}
    dml.metadata_props.add(key=WROTE, value=json.dumps({role: made_by[value] for role, value in wrote.items()}))
    return emit.nodes, typed


def _emit_crop(emit: Emitter, data: str, indices: str, index_dims: tuple, plan: DmlPlan) -> str:
    """``data`` sliced to the sizes of ``indices`` on every dimension but the axis (GatherElements is opset 11+)."""
    rank, axis = len(index_dims), plan.axis
    if plan.crop == Crop.DYNAMIC:
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
