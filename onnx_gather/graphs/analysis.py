"""What DML form makes of each standard gather, decided without changing the model: its ranks (ONNX's shape
inference, then ONNX Runtime's symbolic shape inference, then a run where the caller gives an ``Observer``), whether
DML form expresses it and at which dimension count, and whether ONNX Runtime's DirectML provider keeps it on its CPU
provider. ``convert`` rewrites what this decides; ``check`` reports it without converting."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import onnx
from onnx import TensorProto

from onnx_gather.core import contract
from onnx_gather.core.errors import UserError
from onnx_gather.core.form import DmlForm, FormError, dml_form, scatter_form
from onnx_gather.core.scatter import SCATTER_MODES, scatter_elements_refusal
from onnx_gather.core.sizes import MAX_DIMENSION_COUNT, gather_c, gather_nd_c, output_rank
from onnx_gather.graphs.changes import NodeChange
from onnx_gather.graphs.dml_plan import Crop, DmlPlan, Left
from onnx_gather.graphs.placement.gather import FEATURE_LEVELS, FeatureLevel, cpu_reason, place_gather
from onnx_gather.graphs.placement.nodes import Where, place_nodes, provider_refusal
from onnx_gather.graphs.plumbing import Body, Names, attribute, bodies, node_label, referenced_attribute
from onnx_gather.graphs.ranks import Observer, branch_dependence, symbolic_types
from onnx_gather.graphs.types import ValueType, value_types

HIGHEST_LEVEL = "4.1"  # a device of DirectML's highest feature level has every type the provider registers


def parse_dimension_count(value: str | int) -> int | None:
    """``"auto"`` (None) or a dimension count from 1 to 8."""
    if value == "auto":
        return None
    try:
        count = int(value)
    except (TypeError, ValueError):
        count = 0
    if not 1 <= count <= MAX_DIMENSION_COUNT:
        raise UserError(f"dimension_count must be 'auto' or 1 to {MAX_DIMENSION_COUNT}, got {value!r}")
    return count


def _type_name(elem_type: int) -> str:
    return TensorProto.DataType.Name(elem_type)


@dataclass(frozen=True)
class Options:
    """What a conversion is asked for: ``convert``'s options, checked (``check`` plans with the defaults)."""

    dimension_count: int | None = None  # None: the least each node needs
    out_of_bounds: str = "directml"
    feature_level: FeatureLevel = FEATURE_LEVELS[HIGHEST_LEVEL]  # the device's: where the provider puts gathers
    keep_on_cpu: bool = False  # leave standard what the provider keeps on the CPU on that device
    carrying: contract.Carrying = contract.CUSTOM_OPS
    provider_failures: str = "raise"  # or "onnx": ONNX's values where DirectML fails a node
    scatter_duplicates: str = "error"


class Analysis:
    """The model's value types with the ranks shape inference could not tell resolved, and per gather and scatter
    what DML form makes of it (``decide``)."""

    def __init__(
        self, model: onnx.ModelProto, options: Options | None = None, observation: Observer | None = None
    ) -> None:
        self.model = model
        self.options = options = options or Options()
        # Where the provider puts each node, for the gathers it runs with its CPU kernels: shape computations, folded.
        self.placed = place_nodes(model) if options.keep_on_cpu else {}
        self.types = value_types(model)
        self.unknown: dict[str, str] = {}  # value -> why its rank stays unknown
        self.observed: dict[str, str] = {}  # value -> what of its shape symbolic inference or one run told
        self.ran: set[str] = set()  # the values a run told
        self.observed_run = ""  # that run's inputs
        self._resolve(observation)

    @functools.cached_property
    def names(self) -> Names:
        """Fresh names in the model: only a conversion, or an node_label gather it converts, needs them."""
        return Names(self.model)

    def _resolve(self, observation: Observer | None) -> None:
        """Ranks ONNX shape inference could not tell, for the main graph's gathers: from ONNX Runtime's symbolic
        shape inference, else from one run of the model if ``observation`` asks for it. For GatherND's indices also
        the tuple length (their last dim), which fixes the output's rank."""
        wanted, tuples = self._wanted()
        if not wanted:
            return
        for name, value_type in symbolic_types(self.model, wanted).items():
            self._learn(name, value_type, name in tuples)
        wanted = [name for name in wanted if name not in self.observed]
        if wanted:
            self._observe(observation, wanted, tuples)

    def _wanted(self) -> tuple[list[str], set[str]]:
        """The main graph's gather inputs whose rank (or tuple length: the second set) is unknown; those a run could
        not observe either are noted in ``unknown``."""
        wanted, tuples = [], set()
        for body in bodies(self.model):
            types = self.types.get(body.scope, {})
            for node in body.nodes:
                if node.domain not in ("", "ai.onnx") or node.op_type not in contract.GATHER_OPS:
                    continue
                for name in node.input[:2]:
                    tuple_length = node.op_type == "GatherND" and name == node.input[1]
                    if not name or _told(types.get(name), tuple_length):
                        continue
                    if tuple_length:
                        tuples.add(name)
                    if (why := self._unobservable(body, types, name)) is not None:
                        self.unknown[name] = why
                    else:
                        wanted.append(name)
        return wanted, tuples

    def _unobservable(self, body: Body, types: dict[str, ValueType], name: str) -> str | None:
        """Why a run cannot observe ``name``, or None where it can."""
        if body.container is not self.model.graph:
            return f"it is inside {body.where}, where a run cannot observe it"
        if (branch := branch_dependence(self.model.graph, name, types)) is not None:
            return f"it depends on which branch of If {branch!r} runs"
        return None

    def _observe(self, observation: Observer | None, wanted: list[str], tuples: set[str]) -> None:
        """The ranks of ``wanted`` read off one run, where ``observation`` asks for it; else why they stay unknown."""
        if observation is None:
            for name in wanted:
                self.unknown[name] = (
                    "shape inference cannot tell it; give observation= (or --inputs/--shape on the "
                    "command line) to read it off a run"
                )
            return
        found = observation.observe(self.model, wanted)
        for name in wanted:
            if name in found.types:  # the dims of this run: only the rank (and a tuple length) hold for all
                self._learn(name, found.types[name], name in tuples)
                self.ran.add(name)
                self.observed_run = found.inputs
            else:
                self.unknown[name] = found.failure

    def _learn(self, name: str, seen: ValueType, tuple_length: bool) -> None:
        """Keep the rank of ``name`` that symbolic inference or a run told (``tuple_length``: and its last dim, if
        that is a number), and not its other dims."""
        last = seen.dims[-1:] if tuple_length else ()
        if last and not isinstance(last[0], int):
            return
        self.types[0][name] = ValueType(seen.elem_type, (None,) * (seen.rank - len(last)) + last)
        self.observed[name] = "rank and tuple length" if tuple_length else "rank"

    def decide(self, body: Body, types: dict[str, ValueType], node: onnx.NodeProto, index: int) -> NodeChange:
        """How DML form expresses gather or scatter ``node`` (the ``index``-th of ``body``), or why it is left as it
        is: the report's row, holding the decision (``plan``); for a converted node, ``result`` is the DML node's
        name, fresh in the model."""
        if node.op_type in contract.SCATTER_BY_STANDARD:
            plan = self._scatter(body, types, node, index)
        else:
            referenced = referenced_attribute(node)
            examined = (
                Left(referenced)
                if referenced
                else _examine(body, types, node, self.options.dimension_count, self.unknown, self.options.carrying)
            )
            plan = self._placed(body, types, node, index, examined)
        row = NodeChange(where=body.where, node=node_label(node, index), op_type=node.op_type, plan=plan)
        if isinstance(plan, Left):
            return dataclasses.replace(row, reason=plan.reason)
        name = node.name or self.names.fresh(f"{node.op_type}_{index}")
        return dataclasses.replace(row, result=name, ranks=self._ranks_told(node))

    def _scatter(self, body: Body, types: dict[str, ValueType], node: onnx.NodeProto, index: int) -> DmlPlan | Left:
        """Scatter ``node`` in DML form, or why it stays standard: where the provider runs it on the CPU (without a
        kernel for its version or types, or, with ``keep_on_cpu``, as a shape computation), or where DirectML fails
        it and ONNX's values are asked for (the DML scatters refuse what DirectML refuses)."""
        refusal = provider_refusal(node, body.opset, types)
        placed = self.placed.get(body.where)
        if not refusal and placed is not None and placed[index].by_its_graph:
            refusal = cpu_reason(placed[index].why)
        if refusal:
            return Left(f"kept standard, as the DirectML provider runs it on the CPU: {refusal}")
        if referenced := referenced_attribute(node):
            return Left(referenced)
        options = self.options
        if options.out_of_bounds not in SCATTER_MODES:
            mode = options.out_of_bounds
            return Left(f"out_of_bounds {mode!r} has no scatter form (one of {', '.join(SCATTER_MODES)})")
        plan = _examine_scatter(types, node, options.dimension_count, options.carrying)
        if isinstance(plan, DmlPlan) and plan.fails and options.provider_failures == "onnx":
            return Left(f"DirectML fails it ({plan.fails}); left standard for ONNX's values")
        return plan

    def _placed(
        self, body: Body, types: dict[str, ValueType], node: onnx.NodeProto, index: int, plan: DmlPlan | Left
    ) -> DmlPlan | Left:
        """The plan with where ONNX Runtime's DirectML provider puts the gather on the options' device, and why it
        fails it where it does; left standard where ``keep_on_cpu`` keeps it on the CPU as the provider does."""
        placed = self.placed[body.where][index] if body.where in self.placed else None
        if placed is not None and placed.by_its_graph:
            return Left(f"kept standard, as the DirectML provider keeps it: {cpu_reason(placed.why)}")
        level = self.options.feature_level
        if isinstance(plan, Left):
            known = _known_inputs(types, node)
            if known is None:
                return plan
            data, indices, axis, out_rank, batch = known
            scalar = node.op_type == "GatherND" and indices.rank == 0  # indices a run brings as a scalar
            if out_rank is None and not scalar:  # the output's rank untold: the provider decides when it runs
                return plan
            placement = place_gather(node.op_type, data, indices, axis, level, out_rank, batch)
            # A gather DML form cannot express that the provider takes all the same, and fails.
            fails = placement.reason if scalar and placement.provider == Where.FAILS else ""
            return dataclasses.replace(plan, placement=placement, fails=fails)
        placement = place_gather(node.op_type, plan.data, plan.indices, plan.axis, level, plan.out_rank, plan.batch)
        if placement.provider == Where.CPU and self.options.keep_on_cpu:
            return Left(f"kept standard, as the DirectML provider keeps it: {placement.reason}")
        fails = placement.reason if placement.provider == Where.FAILS else ""
        return dataclasses.replace(plan, placement=placement, fails=fails)

    def _ranks_told(self, node: onnx.NodeProto) -> str:
        """Which of the gather's input ranks symbolic inference or a run told, and which of the two ("": none)."""
        observed = [value for value in node.input[:2] if value in self.observed]
        if not observed:
            return ""
        # One run observed them all.
        roles = " and ".join(
            f"{'data' if value == node.input[0] else 'indices'} {value!r} ({self.observed[value]})"
            for value in observed
        )
        how = (
            f"observed in a run of ONNX Runtime on {self.observed_run}"
            if self.ran & set(observed)
            else "from ONNX Runtime's symbolic shape inference"
        )
        return f"{roles} {how}"


def _told(known: ValueType | None, tuple_length: bool) -> bool:
    """Whether a value's rank is known (and, for GatherND's indices, their tuple length: a number as last dim)."""
    if known is None or known.rank is None:
        return False
    return not tuple_length or (bool(known.dims) and isinstance(known.dims[-1], int))


def _known_inputs(
    types: dict[str, ValueType], node: onnx.NodeProto
) -> tuple[ValueType, ValueType, int, int | None, int] | None:
    """What ``place_gather`` takes of a gather left standard: its inputs' types, its axis (non-negative), its output's
    rank and GatherND's batch dims; None where an input's rank, or an attribute, is unknown."""
    data, indices = (types.get(name) for name in node.input[:2])
    if data is None or data.rank is None or indices is None or indices.rank is None or referenced_attribute(node):
        return None
    axis = attribute(node, "axis", 0) % data.rank if data.rank else 0
    batch = attribute(node, "batch_dims", 0)
    return data, indices, axis, _out_rank(node.op_type, data, indices, batch), batch


def _examine(
    body: Body,
    types: dict[str, ValueType],
    node: onnx.NodeProto,
    dimension_count: int | None,
    unknown: dict[str, str],
    carrying: contract.Carrying,
) -> DmlPlan | Left:
    """How to put ``node`` into DML form, or why it stays standard (``unknown``: why a value's rank is unknown)."""
    if len(node.input) != 2 or len(node.output) != 1:
        return Left("it does not have exactly two inputs and one output")
    data, indices = (types.get(name) for name in node.input)
    for role, name, value_type in (("data", node.input[0], data), ("indices", node.input[1], indices)):
        if value_type is None or value_type.rank is None:
            why = unknown.get(name, "no shape information")
            return Left(f"the rank of {role} {name!r} is unknown ({why})")
    carriers = carrying.carriers
    if data.elem_type not in carrying.node_types and data.elem_type not in carriers:
        return Left(f"{_type_name(data.elem_type)} data cannot be expressed for DirectML")
    if body.opset < 6 and data.elem_type in carriers:
        return Left(f"carrying {_type_name(data.elem_type)} needs Cast-6 (opset {body.opset})")
    axis, batch = attribute(node, "axis", 0), attribute(node, "batch_dims", 0)
    k = indices.dims[-1] if node.op_type == "GatherND" and indices.dims else 0
    if not isinstance(k, int):
        return Left(f"the length of its index tuples (the last dim of indices, {k or '?'}) is unknown")
    try:
        form = dml_form(node.op_type, data.rank, indices.rank, axis, batch, k, dimension_count)
    except FormError as refused:
        return Left(str(refused))
    axis = 0 if node.op_type == "GatherND" else axis % data.rank
    output = ValueType(data.elem_type, _known_dims(_out_dims(form, data, indices, axis), types.get(node.output[0])))
    crop = _crop(data, indices, axis) if node.op_type == "GatherElements" else None
    return DmlPlan(form, (data, indices), output, axis, carriers.get(data.elem_type), crop=crop)


def _out_rank(op_type: str, data: ValueType | None, indices: ValueType | None, batch: int) -> int | None:
    """The standard output's rank, where the inputs' ranks (and GatherND's tuple length) are known."""
    if data is None or indices is None:
        return None
    k = (indices.dims[-1:] or (None,))[0] if op_type == "GatherND" else 0
    return output_rank(op_type, data.rank, indices.rank, batch, k) if isinstance(k, int) else None


def _crop(data: ValueType, indices: ValueType, axis: int) -> Crop | None:
    """None if the indices have the data's sizes off the axis; else how the data is cropped to them."""
    needed, dynamic = False, False
    for d, (data_size, index_size) in enumerate(zip(data.dims, indices.dims, strict=True)):
        if d == axis or (data_size is not None and data_size == index_size):
            continue
        needed = True
        dynamic = dynamic or not (isinstance(data_size, int) and isinstance(index_size, int))
    return (Crop.DYNAMIC if dynamic else Crop.STATIC) if needed else None


def _out_dims(form: DmlForm, data: ValueType, indices: ValueType, axis: int) -> tuple:
    """The standard output's dims: C of the DML op (``core.sizes``) of the standard input's and indices'."""
    if form.op == "Gather":
        return gather_c(data.dims, indices.dims, axis, len(indices.dims))
    return gather_nd_c(data.dims, indices.dims, form.batch_dimension_count) if form.op == "GatherND" else indices.dims


def _known_dims(dims: tuple, known: ValueType | None) -> tuple:
    """``dims``, with each unknown one taken from ``known`` (what shape inference knew) where that has it."""
    if known is None or known.rank != len(dims):
        return dims
    return tuple(d if d is not None else k for d, k in zip(dims, known.dims, strict=True))


def _examine_scatter(
    types: dict[str, ValueType], node: onnx.NodeProto, dimension_count: int | None, carrying: contract.Carrying
) -> DmlPlan | Left:
    """How to put scatter ``node`` into DML form, or why it stays standard; a ScatterElements of the shapes
    DirectML refuses is planned with why the provider fails it."""
    if len(node.input) != 3 or len(node.output) != 1:
        return Left("it does not have exactly three inputs and one output")
    inputs = tuple(types.get(name) for name in node.input)
    for role, name, value_type in zip(("input", "indices", "updates"), node.input, inputs, strict=True):
        if value_type is None or value_type.rank is None:
            return Left(f"the rank of {role} {name!r} is unknown (no shape information)")
    data, indices, updates = inputs
    if data.elem_type not in carrying.node_types and data.elem_type not in carrying.carriers:
        return Left(f"{_type_name(data.elem_type)} data cannot be expressed for DirectML")
    axis = attribute(node, "axis", 0) % data.rank if node.op_type != "ScatterND" else 0
    k = indices.dims[-1] if indices.dims else None
    try:
        form = scatter_form(node.op_type, (data.rank, indices.rank, updates.rank), axis, k, dimension_count)
    except FormError as refused:
        return Left(str(refused))
    nd = node.op_type == "ScatterND"
    refusal = "" if nd else scatter_elements_refusal(data.dims, indices.dims, updates.dims, axis)
    fails = f"{refusal} (0x80070057)" if refusal else ""
    return DmlPlan(form, inputs, data, axis, carrying.carriers.get(data.elem_type), fails)
