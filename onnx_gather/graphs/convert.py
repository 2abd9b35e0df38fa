"""Standard ONNX ``Gather`` and ``GatherElements`` into DML form, as ONNX Runtime's DirectML provider maps them.

The rules (docs/semantics.md section 6), for each node in every graph, subgraph and model-local function:

1. N is ``max(r, q, r + q - 1)`` for Gather (data rank r, indices rank q) and ``r`` for GatherElements,
   or the fixed ``dimension_count``; a node that needs more than N (or 8) dimensions stays standard.
2. Data and indices get ``N - rank`` leading ones (``Unsqueeze``); the axis moves by as many; Gather's
   ``index_dimensions`` is q.
3. The DML output is the ONNX output with ``N - (r + q - 1)`` leading ones (none for GatherElements
   with N = r), removed again with ``Squeeze``. Dynamic dims need no shape arithmetic for this.
4. GatherElements indices smaller than the data off the axis (ONNX allows it, DirectML does not): the
   data is sliced to the indices' sizes first, from ``Shape(indices)`` where they are dynamic.
5. FLOAT16 and BFLOAT16 travel as FLOAT32, BOOL as UINT8 (exact); STRING and other types stay standard.
6. Every DML node carries every attribute, is named after the node it replaces, and its output gets a
   ``value_info`` so that shape inference carries on through it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnx_gather.core import contract, semantics
from onnx_gather.core.contract import DOMAIN
from onnx_gather.core.errors import UserError
from onnx_gather.graphs import provider
from onnx_gather.graphs.graph import Body, Emitter, Names, ValueType, bodies, value_types
from onnx_gather.graphs.order import sort_topologically
from onnx_gather.graphs.placement import FEATURE_LEVELS, FeatureLevel, place
from onnx_gather.graphs.ranks import Observer, branch_dependence, symbolic_types

# An end past any size: Slice clamps it, so the slice keeps the whole axis (lower.py recognises it).
WHOLE_AXIS = 2**62


@dataclass(frozen=True)
class NodeChange:
    """One gather node: what became of it, and why where it stayed as it was."""

    where: str
    node: str
    op_type: str
    result: str  # the DML node's name, or "" where the node stayed standard
    reason: str = ""
    dimension_count: int | None = None  # N of the DML node
    data_type: int | None = None  # the element types DirectML would see (before carrying)
    index_type: int | None = None
    note: str = ""  # how data the bridge cannot carry travels
    ranks: str = ""  # where ranks came from when shape inference could not tell them
    data: ValueType | None = None  # the input types the decision went by, where known
    indices: ValueType | None = None
    axis: int | None = None  # non-negative, where the rank is known
    batch: int = 0  # GatherND's batch_dims
    out_rank: int | None = None  # the standard output's rank, where known
    position: int | None = None  # in its node list, topologically sorted


@dataclass
class Report:
    """What a conversion or a lowering did, for the command line's summary."""

    before: Counter = field(default_factory=Counter)
    after: Counter = field(default_factory=Counter)
    changed: list[NodeChange] = field(default_factory=list)
    left: list[NodeChange] = field(default_factory=list)


def count_ops(model: onnx.ModelProto) -> Counter:
    """Node counts by op type (``domain::op`` outside the default domain), over every graph and function."""
    counts: Counter = Counter()
    for body in bodies(model):
        counts.update(f"{n.domain}::{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type for n in body.nodes)
    return counts


def parse_dimension_count(value: str | int) -> int | None:
    """``"auto"`` (None) or a dimension count from 1 to 8."""
    if value == "auto":
        return None
    try:
        count = int(value)
    except (TypeError, ValueError):
        count = 0
    if not 1 <= count <= contract.MAX_DIMENSION_COUNT:
        raise UserError(f"dimension_count must be 'auto' or 1 to {contract.MAX_DIMENSION_COUNT}, got {value!r}")
    return count


def _attribute(node: onnx.NodeProto, name: str, default: object) -> object:
    found = next((a for a in node.attribute if a.name == name), None)
    return default if found is None else helper.get_attribute_value(found)


def _type_name(elem_type: int) -> str:
    return TensorProto.DataType.Name(elem_type)


class _Converter:
    def __init__(
        self, model: onnx.ModelProto, dimension_count: int | None, out_of_bounds: str, observation: Observer | None,
        keep_on_cpu: FeatureLevel | None,
    ) -> None:  # fmt: skip
        self.model = model
        self.dimension_count = dimension_count
        self.out_of_bounds = out_of_bounds
        self.keep_on_cpu = keep_on_cpu
        # Where the provider puts each node, for the gathers it runs with its CPU kernels: shape computations, folded.
        self.placed = provider.place(model) if keep_on_cpu is not None else {}
        self.names = Names(model)
        self.types = value_types(model)
        self.report = Report()
        self.unknown: dict[str, str] = {}  # value -> why its rank stays unknown
        self.observed: dict[str, str] = {}  # value -> what of its shape symbolic inference or one run told
        self.ran: set[str] = set()  # the values a run told
        self.observed_run = ""  # that run's inputs
        self._resolve(observation)

    def _resolve(self, observation: Observer | None) -> None:
        """Ranks ONNX shape inference could not tell, for the main graph's gathers: from ONNX Runtime's symbolic
        shape inference, else from one run of the model if ``observation`` asks for it. For GatherND's indices also
        the tuple length (their last dim), which fixes the output's rank."""
        wanted, tuples = [], set()
        for body in bodies(self.model):
            types = self.types.get(body.scope, {})
            for node in body.nodes:
                if node.domain not in ("", "ai.onnx") or node.op_type not in contract.GATHER_OPS:
                    continue
                for name in node.input[:2]:
                    known = types.get(name)
                    tuple_length = node.op_type == "GatherND" and name == node.input[1]
                    if not name or (known is not None and known.rank is not None and not (
                            tuple_length and (not known.dims or not isinstance(known.dims[-1], int)))):  # fmt: skip
                        continue
                    if tuple_length:
                        tuples.add(name)
                    if body.container is not self.model.graph:
                        self.unknown[name] = f"it is inside {body.where}, where a run cannot observe it"
                    elif (branch := branch_dependence(self.model.graph, name, types)) is not None:
                        self.unknown[name] = f"it depends on which branch of If {branch!r} runs"
                    else:
                        wanted.append(name)
        if not wanted:
            return
        for name, value_type in symbolic_types(self.model, wanted).items():
            last = value_type.dims[-1:] if name in tuples else ()
            if last and not isinstance(last[0], int):
                continue
            self.types[0][name] = ValueType(value_type.elem_type, (None,) * (value_type.rank - len(last)) + last)
            self.observed[name] = "rank and tuple length" if name in tuples else "rank"
        wanted = [name for name in wanted if name not in self.observed]
        if not wanted:
            return
        if observation is None:
            for name in wanted:
                self.unknown[name] = (
                    "shape inference cannot tell it; give observation= (or --inputs/--shape on the "
                    "command line) to read it off a run"
                )
            return
        found = observation.observe(self.model, wanted)
        for name in wanted:
            if name in found.types:
                seen = found.types[name]  # the dims of this run: only the rank (and a tuple length) hold for all
                last = seen.dims[-1:] if name in tuples else ()
                self.types[0][name] = ValueType(seen.elem_type, (None,) * (seen.rank - len(last)) + last)
                self.observed[name] = "rank and tuple length" if name in tuples else "rank"
                self.ran.add(name)
                self.observed_run = found.inputs
            else:
                self.unknown[name] = found.failure

    def run(self) -> None:
        for body in reversed(bodies(self.model)):
            types = self.types.get(body.scope, {})
            rebuilt, changed, declared = [], False, _declarations(body)
            for index, node in enumerate(body.nodes):
                if node.domain in ("", "ai.onnx") and node.op_type in contract.GATHER_OPS:
                    new_nodes, typed = self._convert(body, types, node, index)
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
        data, indices = (types.get(name) for name in node.input[:2])
        known = data is not None and data.rank is not None and indices is not None and indices.rank is not None
        axis = _attribute(node, "axis", 0) % data.rank if known and data.rank else None
        plan = _examine(body, types, node, self.dimension_count, self.unknown)
        placed = self.placed[body.where][index] if body.where in self.placed else None
        if placed is not None and placed.why in provider.REASONS:
            plan = f"kept standard, as the DirectML provider keeps it: {provider.REASONS[placed.why]}"
        elif isinstance(plan, _Plan) and self.keep_on_cpu is not None:
            placement = place(node.op_type, plan.data, plan.indices, plan.axis, self.keep_on_cpu, plan.out_rank)
            if placement.provider == "CPU":
                plan = f"kept standard, as the DirectML provider keeps it: {placement.reason}"
        if isinstance(plan, str):
            data, indices = (data, indices) if known else (None, None)
            batch = _attribute(node, "batch_dims", 0)
            self.report.left.append(NodeChange(
                body.where, node.name, node.op_type, "", plan, data=data, indices=indices, axis=axis, batch=batch,
                out_rank=_out_rank(node.op_type, data, indices, batch), position=index,
            ))  # fmt: skip
            return None, {}
        name = node.name or self.names.fresh(f"{node.op_type}_{index}")
        nodes, value_infos = self._emit(body, node, name, plan, types.get(node.output[0]))
        note = ""
        if plan.carrier is not None:
            exact = "exact" if plan.data.elem_type == TensorProto.BOOL else "exact but for NaN payloads, made canonical"
            note = f"{_type_name(plan.data.elem_type)} data travels as {_type_name(plan.carrier)} ({exact})"
        observed = [value for value in node.input[:2] if value in self.observed]
        ranks = ""
        if observed:  # one run observed them all
            roles = " and ".join(f"{'data' if value == node.input[0] else 'indices'} {value!r} ({self.observed[value]})"
                                 for value in observed)  # fmt: skip
            how = f"observed in a run of ONNX Runtime on {self.observed_run}" if self.ran & set(observed) else \
                "from ONNX Runtime's symbolic shape inference"  # fmt: skip
            ranks = f"{roles} {how}"
        self.report.changed.append(NodeChange(
            body.where, node.name, node.op_type, name, f"N={plan.n}", plan.n, plan.data.elem_type,
            plan.indices.elem_type, note, ranks, plan.data, plan.indices, plan.axis, plan.batch, plan.out_rank, index,
        ))  # fmt: skip
        return nodes, value_infos

    def _emit(
        self, body: Body, node: onnx.NodeProto, name: str, plan: _Plan, known: ValueType | None
    ) -> tuple[list[onnx.NodeProto], dict[str, ValueType]]:
        """Slice, carry, pad -> the DML node -> unpad, carry back, ending in the original output's name.

        Returns also the type of every value it makes, and of its inputs and output, with all that is known of
        their shapes (``known``: the output's type before), for ``_record``: the lowering needs the DML node's
        ranks, and shape inference cannot see through the DML node, nor past a contrib operator in front of it."""
        emit = Emitter(body, self.names, name)
        data, indices, n = plan.data, plan.indices, plan.n
        carried = plan.carrier or data.elem_type
        typed: dict[str, ValueType] = {}
        x = node.input[0]
        x_dims = data.dims
        if plan.slice is not None:
            x = _emit_slice(emit, x, node.input[1], indices.dims, plan.axis, plan.slice)
            x_dims = tuple(d if k == plan.axis else indices.dims[k] for k, d in enumerate(data.dims))
            typed[x] = ValueType(data.elem_type, x_dims)
        if plan.carrier is not None:
            x = emit.node("Cast", [x], "carry_input", to=plan.carrier)
            typed[x] = ValueType(carried, x_dims)
        x = emit.pad(x, n - data.rank, "pad_input")
        typed[x] = ValueType(carried, (1,) * (n - data.rank) + x_dims)
        i = emit.pad(node.input[1], n - indices.rank, "pad_indices")
        typed[i] = ValueType(indices.elem_type, (1,) * (n - indices.rank) + indices.dims)
        ones = n - plan.out_rank  # the DML output is the standard output with these leading ones
        last = ones == 0 and plan.carrier is None
        dml_output = node.output[0] if last else self.names.fresh(f"{name}/output")
        mode = self.out_of_bounds
        if mode == "directml" and plan.carrier is not None and plan.data.elem_type != TensorProto.BOOL:
            mode = contract.DIRECTML_16BIT  # the op sees FLOAT32; DirectML's reading depends on the 2-byte type
        if plan.op == "GatherND":
            attributes = {"input_dimension_count": data.rank, "indices_dimension_count": indices.rank,
                          "batch_dimension_count": plan.batch, "out_of_bounds": mode}  # fmt: skip
        else:
            attributes = {"axis": plan.axis + n - data.rank, "out_of_bounds": mode}
        if plan.op == "Gather":
            attributes["index_dimensions"] = indices.rank
        emit.nodes.append(
            helper.make_node(
                contract.BY_STANDARD[node.op_type].op_type, [x, i], [dml_output], name=name, domain=DOMAIN, **attributes
            )
        )
        out_dims = _known_dims(plan.out_dims, known)
        typed[dml_output] = ValueType(carried, (1,) * ones + out_dims)
        y = dml_output
        if not last:
            y = emit.unpad(y, ones, "unpad_output", None if plan.carrier else node.output[0])
            typed[y] = ValueType(carried, out_dims)
        if plan.carrier is not None:
            emit.node("Cast", [y], "carry_output", node.output[0], to=data.elem_type)
        typed[node.output[0]] = ValueType(data.elem_type, out_dims)
        return emit.nodes, typed


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


@dataclass(frozen=True)
class _Plan:
    """One standard gather as DML form takes it."""

    data: ValueType
    indices: ValueType
    axis: int  # non-negative (GatherND: 0)
    n: int  # the DML nodes' dimension count
    op: str  # Gather, GatherElements or GatherND
    carrier: int | None  # the element type the data travels as, where the bridge cannot carry it
    slice: bool | None  # GatherElements data to slice to the indices: None, or whether it needs Shape
    batch: int = 0  # GatherND's batch_dims
    tuple_size: int = 0  # GatherND's index tuple length (the indices' last dim)

    @property
    def out_dims(self) -> tuple:
        data, indices = self.data.dims, self.indices.dims
        if self.op == "Gather":
            return (*data[: self.axis], *indices, *data[self.axis + 1 :])
        if self.op == "GatherND":
            return (*indices[:-1], *data[self.batch + self.tuple_size :])
        return indices

    @property
    def out_rank(self) -> int:
        return len(self.out_dims)


def _examine(
    body: Body, types: dict[str, ValueType], node: onnx.NodeProto, dimension_count: int | None, unknown: dict[str, str]
) -> _Plan | str:
    """How to put ``node`` into DML form, or why it stays standard (``unknown``: why a value's rank is unknown)."""
    if len(node.input) != 2 or len(node.output) != 1:
        return "it does not have exactly two inputs and one output"
    data, indices = (types.get(name) for name in node.input)
    for role, name, value_type in (("data", node.input[0], data), ("indices", node.input[1], indices)):
        if value_type is None or value_type.rank is None:
            why = unknown.get(name, "no shape information")
            return f"the rank of {role} {name!r} is unknown ({why})"
    if data.elem_type not in contract.NODE_DATA_TYPES and data.elem_type not in contract.CARRIERS:
        return f"{_type_name(data.elem_type)} data cannot be expressed for DirectML"
    if body.opset < 6 and data.elem_type in contract.CARRIERS:
        return f"carrying {_type_name(data.elem_type)} needs Cast-6 (opset {body.opset})"
    r, q = data.rank, indices.rank
    if node.op_type == "GatherND":
        plan = _examine_nd(data, indices, _attribute(node, "batch_dims", 0))
        if isinstance(plan, str):
            return plan
    else:
        axis = _attribute(node, "axis", 0)
        if not -r <= axis < r:
            return f"axis {axis} is out of range for data of rank {r}"
        if node.op_type == "GatherElements" and q != r:
            return f"indices rank {q} differs from data rank {r}"
        sliced = _slice_plan(data, indices, axis % r) if node.op_type == "GatherElements" else None
        plan = _Plan(data, indices, axis % r, 0, node.op_type, contract.CARRIERS.get(data.elem_type), sliced)
    needed = max(r, q, plan.out_rank)
    n = dimension_count or needed
    if needed > n or needed > contract.MAX_DIMENSION_COUNT:
        limit = f"the dimension count {n}" if dimension_count else "DirectML's 8"
        return f"it needs {needed} dimensions, more than {limit}"
    return dataclasses.replace(plan, n=n)


def _out_rank(op_type: str, data: ValueType | None, indices: ValueType | None, batch: int) -> int | None:
    """The standard output's rank, where the inputs' ranks (and GatherND's tuple length) are known."""
    if data is None or indices is None:
        return None
    if op_type == "GatherND":
        k = indices.dims[-1] if indices.dims else None
        return indices.rank - 1 + data.rank - batch - k if isinstance(k, int) else None
    return data.rank + indices.rank - 1 if op_type == "Gather" else data.rank


def _examine_nd(data: ValueType, indices: ValueType, batch: int) -> _Plan | str:
    r, q = data.rank, indices.rank
    if not 0 <= batch < min(r, q):
        return f"batch_dims {batch} is out of range [0, {min(r, q)}) for data rank {r} and indices rank {q}"
    k = indices.dims[-1]
    if not isinstance(k, int):
        return f"the length of its index tuples (the last dim of indices, {k or '?'}) is unknown"
    if not 1 <= k <= r - batch:
        return f"index tuples of {k} coordinates do not fit data of rank {r} with batch_dims {batch}"
    return _Plan(data, indices, 0, 0, "GatherND", contract.CARRIERS.get(data.elem_type), None, batch, k)


def _slice_plan(data: ValueType, indices: ValueType, axis: int) -> bool | None:
    """None if the indices have the data's sizes off the axis; else whether slicing to them needs ``Shape``."""
    needed, dynamic = False, False
    for d, (data_size, index_size) in enumerate(zip(data.dims, indices.dims, strict=True)):
        if d == axis or (data_size is not None and data_size == index_size):
            continue
        needed = True
        dynamic = dynamic or not (isinstance(data_size, int) and isinstance(index_size, int))
    return dynamic if needed else None


def _emit_slice(emit: Emitter, data: str, indices: str, index_dims: tuple, axis: int, dynamic: bool) -> str:
    """``data`` sliced to the sizes of ``indices`` on every dimension but ``axis`` (GatherElements is opset 11+)."""
    rank = len(index_dims)
    if dynamic:
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
        imports.append(helper.make_opsetid(DOMAIN, 1))


def convert(
    model: onnx.ModelProto,
    dimension_count: str | int = "auto",
    out_of_bounds: str = "directml",
    observation: Observer | None = None,
    keep_on_cpu: str | None = None,
) -> tuple[onnx.ModelProto, Report]:
    """``to_dml`` with a report of what was converted and what was left standard, and why."""
    semantics.check_out_of_bounds("to_dml", out_of_bounds)
    contract.register_schemas()
    count = parse_dimension_count(dimension_count)
    if keep_on_cpu is not None and keep_on_cpu not in FEATURE_LEVELS:
        raise UserError(f"keep_on_cpu must be a feature level ({', '.join(FEATURE_LEVELS)}), got {keep_on_cpu!r}")
    result = onnx.ModelProto()
    result.CopyFrom(model)
    sort_topologically(result)
    level = None if keep_on_cpu is None else FEATURE_LEVELS[keep_on_cpu]
    converter = _Converter(result, count, out_of_bounds, observation, level)
    converter.report.before = count_ops(model)
    converter.run()
    converter.report.after = count_ops(result)
    return result, converter.report


def to_dml(
    model: onnx.ModelProto,
    dimension_count: str | int = "auto",
    out_of_bounds: str = "directml",
    observation: Observer | None = None,
    keep_on_cpu: str | None = None,
) -> onnx.ModelProto:
    """Every standard Gather, GatherElements and GatherND that DirectML can express, rewritten into DML form.

    ``dimension_count`` is ``"auto"`` (the least N each node needs, as ONNX Runtime's DirectML provider
    does) or a fixed N from 1 to 8 (4 emulates feature levels below 3.0). ``out_of_bounds`` is written
    on every DML node. Where ONNX shape inference cannot tell a gather's ranks, ONNX Runtime's symbolic shape
    inference is asked (nothing runs); what it cannot tell either is read off one run of the model with ONNX
    Runtime on the inputs ``observation`` gives or generates, only when ``observation`` is given (None: no run).
    ``keep_on_cpu``, a feature level, leaves standard the gathers ONNX Runtime's DirectML provider on such a device
    keeps on its CPU provider (shape computations, gathers of constants it folds, BFLOAT16, a type the device
    lacks). Nodes that cannot be expressed stay standard (``convert`` reports them). The DML ops' schemas are
    declared to onnx (``core.contract.register_schemas``), so ``onnx.shape_inference`` types the result.
    """
    return convert(model, dimension_count, out_of_bounds, observation, keep_on_cpu)[0]
