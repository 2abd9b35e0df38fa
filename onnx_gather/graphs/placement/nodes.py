"""Where ONNX Runtime's DirectML provider places every node of a model, worked out without running it.

ONNX Runtime decides in three steps, mirrored here graph by graph (subgraphs are placed on their own):

1. Its level-1 optimizations run before any placement; constant folding among them computes, once and with the CPU
   provider's kernels, every deterministic node whose inputs are all constant initializers, and every ``Shape`` of a
   value whose shape is static (``ConstantFolding``, DequantizeLinear excepted as ONNX Runtime excepts it by
   default). Such a node never runs on any provider.
2. ``GetCpuPreferredNodes`` (onnxruntime/core/framework/fallback_cpu_capability.cc): starting from what the
   provider's kernels leave in CPU memory (the outputs of ``Shape`` and ``Size``) and from nodes it has no kernel
   for, a node goes to the CPU provider when each of its inputs is in CPU memory, a graph input or an initializer of
   at most 100 elements, none is FLOAT16 or BFLOAT16, and none is an input the provider's kernel takes in CPU memory
   anyway (a Reshape's shape). These are the small shape computations.
3. The provider takes every other node it has a kernel for (``onnx_gather/graphs/placement/dml_kernels.json``, read
   from its registration table by ``tools/dml_kernels.py``; a kernel registered without an end version takes nodes
   of exactly its since-version: a Cast of opset 23 has none, for the provider registers Cast-21 and earlier) and
   whose data types the device has (``onnx_gather.graphs.placement.gather``); the CPU provider the rest.

Checked against the placement real DirectML reports (tests/test_real_models.py): every gather of the third-party
models of the tests, and every node that ONNX Runtime's later fusions leave under its own name.
"""

from __future__ import annotations

import functools
import heapq
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from importlib import resources

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx.reference import ReferenceEvaluator

from onnx_gather.graphs.placement import functions, queries
from onnx_gather.graphs.plumbing import RANDOM_OPS, Body, attribute, bodies, inner_bodies, is_constant, subgraphs
from onnx_gather.graphs.types import ValueType, value_types, without_weights

SMALL_INITIALIZER = 100  # kSmallInitializerThreshold: elements
# Inputs of these types keep a node off the CPU provider (fallback_cpu_capability.cc).
_NEVER_TO_CPU = frozenset(
    {
        TensorProto.FLOAT16,
        TensorProto.BFLOAT16,
        TensorProto.FLOAT8E4M3FN,
        TensorProto.FLOAT8E4M3FNUZ,
        TensorProto.FLOAT8E5M2,
        TensorProto.FLOAT8E5M2FNUZ,
    }
)
_TYPE_CODES = {
    "float": TensorProto.FLOAT,
    "double": TensorProto.DOUBLE,
    "float16": TensorProto.FLOAT16,
    "bool": TensorProto.BOOL,
    "string": TensorProto.STRING,
    "uint4": TensorProto.UINT4,
    "int4": TensorProto.INT4,
    "complex64": TensorProto.COMPLEX64,
    "complex128": TensorProto.COMPLEX128,
    **{
        f"{sign}int{bits}": getattr(TensorProto, f"{sign.upper()}INT{bits}")
        for sign in ("", "u")
        for bits in (8, 16, 32, 64)
    },
}


class At(StrEnum):
    """When DirectML's failure comes."""

    CREATION = "when the session is created"
    RUN = "when it runs"
    PROCESS = "when it runs, ending the process that runs ONNX Runtime"


@dataclass(frozen=True)
class Failure:
    """How DirectML fails: its HRESULT ("" where the process ends instead) and when."""

    hresult: str
    at: At


CREATION_INVALID = Failure("80070057", At.CREATION)  # E_INVALIDARG when the session is created


class Where(StrEnum):
    """Where a node runs, or what becomes of it: on DirectML or the CPU provider; taken by the provider and failing;
    a gather DirectML cannot express; unknown until the model runs; a DML node of onnx-gather's (a converted
    model's), which tells nothing of where the gather it came from would run."""

    DIRECTML = "DirectML"
    CPU = "CPU"
    FAILS = "fails"
    REFUSED = "refused"
    UNKNOWN = "unknown"
    DML = "DML"


class Why(StrEnum):
    """Why a node goes where it goes; for the reasons the graph around a node gives (a Constant, folded, a shape
    computation), the ``sentence`` saying so."""

    sentence: str

    def __new__(cls, value: str, sentence: str = "") -> Why:
        member = str.__new__(cls, value)
        member._value_ = value
        member.sentence = sentence
        return member

    CONSTANT = (
        "constant",
        "a Constant: ONNX Runtime makes its value an initializer as it loads the model; no provider runs it",
    )
    FOLDED = (
        "folded",
        "its inputs are constants: ONNX Runtime computes it once, with its CPU kernel, when the session is "
        "created (constant folding)",
    )
    CPU_PREFERRED = (
        "shape computation",
        "a shape computation: ONNX Runtime keeps it on its CPU provider (each input is in CPU memory, "
        "a graph input or a small initializer)",
    )
    NO_KERNEL = "no kernel"
    UNSUPPORTED = "refused by the provider's support query"
    EXPANDED = "expanded into its ONNX function body"
    DEVICE_TYPES = "a tensor type the device lacks"  # the device's types aside here: ``placement.check`` says it
    DIRECTML = "DirectML"

    @property
    def by_its_graph(self) -> bool:
        """On the CPU for what the graph around the node makes of it, whatever the node itself is."""
        return bool(self.sentence)

    @property
    def runs(self) -> bool:
        """Whether some provider runs the node: not a Constant, nor folded."""
        return self not in (Why.CONSTANT, Why.FOLDED)


@dataclass(frozen=True)
class Kernel:
    """One registration of the provider: from ``since`` on, for these types per constraint name."""

    since: int
    types: dict[str, frozenset[int]]
    cpu_inputs: frozenset[int]


@functools.cache
def _kernels() -> tuple[dict[tuple[str, str], list[Kernel]], dict[str, frozenset[int]], str]:
    table = json.loads(resources.files("onnx_gather.graphs.placement").joinpath("dml_kernels.json").read_text())
    kernels: dict[tuple[str, str], list[Kernel]] = {}
    for domain, op, since, constraints, cpu_inputs in table["kernels"]:
        types = {name: frozenset(_TYPE_CODES[t] for t in names) for name, names in constraints.items()}
        kernels.setdefault((domain, op), []).append(Kernel(since, types, frozenset(cpu_inputs)))
    for domain, op, since, cpu_inputs in table["cpu_registered"]:
        kernels.setdefault((domain, op), []).append(Kernel(since, {}, frozenset(cpu_inputs)))
    for registrations in kernels.values():
        registrations.sort(key=lambda kernel: kernel.since)
    cpu_outputs = {op: frozenset(outputs) for op, outputs in table["cpu_outputs"].items()}
    return kernels, cpu_outputs, table["source"]


def source() -> str:
    """Which ONNX Runtime source the provider's kernel table was read from."""
    return _kernels()[2]


def directml_versions(op_type: str, domain: str = "") -> tuple[int, ...]:
    """The versions of ``op_type`` the provider registers a DirectML kernel from, oldest first (not the operators it
    registers on its CPU side: sequences, optionals, If). ONNX Runtime matches a kernel registered without an end
    version only to a node of that very version (``KernelRegistry::VerifyKernelDef``)."""
    return tuple(kernel.since for kernel in _kernels()[0].get((domain, op_type), []) if kernel.types)


@dataclass(frozen=True)
class Placed:
    """Where one node runs: ``Where.DIRECTML`` or ``Where.CPU``, and why."""

    provider: Where
    why: Why
    detail: str = field(default="", compare=False)  # for NO_KERNEL, DIRECTML, UNSUPPORTED, EXPANDED: which kernel, why

    @property
    def by_its_graph(self) -> bool:
        """On the CPU for what the graph around it makes of it (a Constant, folded, a shape computation), whatever
        the node itself is."""
        return self.why.by_its_graph

    @property
    def reason(self) -> str:
        """Why, in a sentence: the graph's (``Why.sentence``), else the detail, else the why."""
        return self.why.sentence or self.detail or str(self.why)


def _schema(node: onnx.NodeProto, opset: int) -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(node.op_type, opset, node.domain)
    except onnx.defs.SchemaError:
        return None


def _formal_types(schema: onnx.defs.OpSchema, node: onnx.NodeProto) -> Iterable[tuple[str, str]]:
    """(type constraint name, value name) for every input and output of ``node``."""
    for formal, actual in ((schema.inputs, node.input), (schema.outputs, node.output)):
        for position, name in enumerate(actual):
            if formal and name:
                yield formal[min(position, len(formal) - 1)].type_str, name


def _kernel(node: onnx.NodeProto, opset: int, types: dict[str, ValueType]) -> tuple[Kernel | None, str]:
    """The provider's kernel for ``node``, if it registers one for its version and types; and which one, or why
    none."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    op = f"{domain}:{node.op_type}" if domain else node.op_type
    registrations = _kernels()[0].get((domain, node.op_type))
    if not registrations:
        return None, f"the DirectML provider has no kernel for {op}"
    schema = _schema(node, opset) if domain == "" else None
    since = schema.since_version if schema is not None else 1
    # Registered without an end version, a kernel takes nodes of exactly its since-version (VerifyKernelDef)
    kernel = next((kernel for kernel in registrations if kernel.since == since), None)
    if kernel is None:
        versions = ", ".join(str(kernel.since) for kernel in registrations)
        return (
            None,
            f"the DirectML provider's {op} kernels are {op}-{versions.replace(', ', f', {op}-')}; this is {op}-{since}",
        )
    if schema is not None:
        for constraint, name in _formal_types(schema, node):
            allowed = kernel.types.get(constraint)
            known = types.get(name)
            if allowed is not None and known is not None and known.elem_type not in allowed:
                type_name = TensorProto.DataType.Name(known.elem_type)
                return None, f"the DirectML provider's {op}-{kernel.since} kernel takes no {type_name} {name!r}"
    return kernel, f"the DirectML provider's {op}-{kernel.since} kernel"


class _Graph:
    """One graph as ONNX Runtime holds it for placement: its constants, small initializers and inputs."""

    def __init__(self, body: Body, outer: _Graph | None, types: dict[str, ValueType]) -> None:
        graph = body.container
        self.body, self.outer, self.types = body, outer, types
        initializers = {t.name: t for t in graph.initializer} if isinstance(graph, onnx.GraphProto) else {}
        self.inputs = {value.name for value in graph.input} - set(initializers)
        self.produced = {output for node in body.nodes for output in node.output}
        overridable = {value.name for value in graph.input} & set(initializers)
        self.constants = set(initializers) - overridable
        self.small = {name for name, tensor in initializers.items() if math.prod(tensor.dims) <= SMALL_INITIALIZER}
        for node in body.nodes:  # ONNX Runtime turns Constant nodes into initializers as it loads the model
            if is_constant(node):
                self.constants.add(node.output[0])
                if _constant_elements(node) <= SMALL_INITIALIZER:
                    self.small.add(node.output[0])

    def constant(self, name: str) -> bool:
        graph: _Graph | None = self
        while graph is not None:
            if name in graph.constants:
                return True
            if name in graph.inputs or name in graph.produced:
                return False
            graph = graph.outer
        return False

    def small_initializer(self, name: str) -> bool:
        graph: _Graph | None = self
        while graph is not None:
            if name in graph.small:
                return True
            graph = graph.outer
        return False


def _constant_elements(node: onnx.NodeProto) -> int:
    for given in node.attribute:
        if given.type == onnx.AttributeProto.TENSOR:
            return math.prod(given.t.dims)
        if given.type in (onnx.AttributeProto.FLOATS, onnx.AttributeProto.INTS, onnx.AttributeProto.STRINGS):
            return len(given.floats) + len(given.ints) + len(given.strings)
    return 1


def _static_shape(types: dict[str, ValueType], name: str) -> bool:
    known = types.get(name)
    return known is not None and known.dims is not None and all(isinstance(d, int) for d in known.dims)


def _folds(node: onnx.NodeProto) -> bool:
    """Whether ONNX Runtime's constant folding computes ``node`` where its inputs are constants: it is deterministic,
    holds no subgraph, and is no DequantizeLinear (which ONNX Runtime excepts by default)."""
    return node.op_type not in ("DequantizeLinear", *RANDOM_OPS) and not any(True for _ in subgraphs(node))


def _fold(graph: _Graph) -> set[int]:
    """The positions of the nodes ONNX Runtime's constant folding computes before placement."""
    folded: set[int] = set()
    for position, node in enumerate(graph.body.nodes):
        if node.op_type == "Constant" or not _folds(node):
            continue
        if node.op_type == "Shape" and node.domain in ("", "ai.onnx"):
            foldable = _static_shape(graph.types, node.input[0])
        else:
            foldable = all(graph.constant(name) for name in node.input if name)
        if foldable:
            folded.add(position)
            for output in node.output:
                graph.constants.add(output)
                if _static_shape(graph.types, output) and math.prod(graph.types[output].dims) <= SMALL_INITIALIZER:
                    graph.small.add(output)
    return folded


def _cpu_preferred(graph: _Graph, kernels: list[Kernel | None], live: list[int]) -> set[int]:
    """GetCpuPreferredNodes over the nodes at positions ``live``: the positions it sends to the CPU provider."""
    nodes = graph.body.nodes
    _, cpu_outputs, _ = _kernels()
    consumers: dict[str, list[int]] = {}
    for position in live:
        for name in nodes[position].input:
            consumers.setdefault(name, []).append(position)
    in_cpu_memory: set[str] = set()
    candidates: list[int] = []
    for position in live:
        node = nodes[position]
        if kernels[position] is None:
            continue
        for index in cpu_outputs.get(node.op_type, ()):
            if index < len(node.output):
                in_cpu_memory.add(node.output[index])
                candidates.extend(consumers.get(node.output[index], []))
    heapq.heapify(candidates)  # positions are a topological order: ONNX Runtime visits candidates in that order
    visited: set[int] = set()
    preferred: set[int] = set()
    while candidates:
        position = heapq.heappop(candidates)
        if position in visited:
            continue
        visited.add(position)
        node, kernel = nodes[position], kernels[position]
        if kernel is None or _to_cpu(graph, node, kernel, in_cpu_memory):
            if kernel is not None:
                preferred.add(position)
            in_cpu_memory.update(node.output)
            for output in node.output:
                for consumer in consumers.get(output, []):
                    heapq.heappush(candidates, consumer)
    return preferred


def _to_cpu(graph: _Graph, node: onnx.NodeProto, kernel: Kernel, in_cpu_memory: set[str]) -> bool:
    for index, name in enumerate(node.input):
        known = graph.types.get(name)
        if known is not None and known.elem_type in _NEVER_TO_CPU:
            return False
        if graph.small_initializer(name) or name in graph.inputs:
            continue
        if name not in in_cpu_memory or index in kernel.cpu_inputs:
            return False
    return True


def place_nodes(model: onnx.ModelProto) -> dict[str, list[Placed]]:
    """Every node of ``model``'s graphs (in topological order, as ``model_io.load`` leaves them), by ``Body.where``
    and position: where the DirectML provider puts it, the data types of the device aside (``gather``)."""
    types = _folded_types(model)  # ONNX Runtime knows the size of what it folds
    placed: dict[str, list[Placed]] = {}
    main = bodies(model)[0]
    stack: list[tuple[Body, _Graph | None]] = [(main, None)]
    while stack:
        body, outer = stack.pop()
        graph = _Graph(body, outer, types.get(body.scope, {}))
        folded = _fold(graph)
        found = [_kernel(node, body.opset, graph.types) for node in body.nodes]
        kernels = [kernel for kernel, _ in found]
        live = [position for position in range(len(body.nodes)) if position not in folded]
        preferred = _cpu_preferred(graph, kernels, live)
        verdicts = []
        for position, node in enumerate(body.nodes):
            if is_constant(node):
                verdicts.append(Placed(Where.CPU, Why.CONSTANT))
            elif position in folded:
                verdicts.append(Placed(Where.CPU, Why.FOLDED))
            elif kernels[position] is None:
                verdicts.append(
                    _expanded(node, body.opset, graph.types) or Placed(Where.CPU, Why.NO_KERNEL, found[position][1])
                )
            elif position in preferred:
                verdicts.append(Placed(Where.CPU, Why.CPU_PREFERRED))
            elif refusal := queries.query_refusal(node, kernels[position].since, graph.types):
                verdicts.append(Placed(Where.CPU, Why.UNSUPPORTED, refusal))
            else:
                verdicts.append(Placed(Where.DIRECTML, Why.DIRECTML, found[position][1]))
            stack.extend((inner, graph) for inner in inner_bodies(body, node, position))
        placed[body.where] = verdicts
    return placed


def provider_refusal(node: onnx.NodeProto, opset: int, types: dict[str, ValueType]) -> str:
    """Why the provider leaves ``node`` to the CPU provider whatever feeds it: no kernel for its version or types, or
    its support query refuses it ("" where it takes it)."""
    kernel, why = _kernel(node, opset, types)
    return why if kernel is None else queries.query_refusal(node, kernel.since, types)


def _expanded(node: onnx.NodeProto, opset: int, types: dict[str, ValueType]) -> Placed | None:
    """Where the nodes of ``node``'s ONNX function body go, where ONNX Runtime expands it (neither provider has a
    kernel for its version, ``functions``); None where it does not. The body is placed as a graph of its own whose
    inputs are graph inputs: where they are computed by other nodes, ONNX Runtime's shape-computation walk may differ.
    """
    schema = _schema(node, opset) if node.domain in ("", "ai.onnx") else None
    if schema is None or functions.cpu_has_kernel(node.domain, node.op_type, schema.since_version):
        return None
    expanded = functions.body(node, schema, opset, types)
    if expanded is None:
        return None
    placed = [p for verdicts in place_nodes(expanded).values() for p in verdicts]
    where = [p.provider for p in placed if p.why != Why.CONSTANT]
    counts = ", ".join(
        f"{where.count(p)} on {name}"
        for p, name in ((Where.DIRECTML, "DirectML"), (Where.CPU, "the CPU provider"))
        if p in where
    )
    detail = (
        f"neither provider has a kernel for {node.op_type}-{schema.since_version}: ONNX Runtime expands it into its "
        f"ONNX function body, whose nodes run {counts or 'nowhere (all constants)'}"
    )
    return Placed(Where.DIRECTML if Where.DIRECTML in where else Where.CPU, Why.EXPANDED, detail)


MATERIALIZED = 4096  # elements: the folded values shape inference is given, as ONNX Runtime has them


def _folded_types(model: onnx.ModelProto) -> dict[int, dict[str, ValueType]]:
    """Value types as ONNX Runtime knows them once its constant folding has run: the small values it computes in the
    main graph (a ``Shape`` of a static shape, arithmetic on constants) are given to ONNX's shape inference as
    initializers, round after round while that folds more (a Pad whose pads are a Cast of a constant: its output's
    dims, then the Shapes of it)."""
    light = without_weights(model)
    for _ in range(8):
        types = value_types(light, propagate=True)
        if not _materialize(light, types.get(0, {})):
            return types
    return value_types(light, propagate=True)


def _materialize(model: onnx.ModelProto, types: dict[str, ValueType]) -> bool:
    """Replace, in ``model``'s main graph, every node ONNX Runtime folds whose output is small by initializers of
    its values, computed with ONNX's reference evaluator; whether any was."""
    graph = model.graph
    overridable = {value.name for value in graph.input}
    values = {t.name: t for t in graph.initializer if t.name not in overridable and _has_data(t)}
    kept, folded = [], False
    for node in graph.node:
        standard = node.domain in ("", "ai.onnx")  # what ONNX's reference evaluator computes
        computed = _computed(model, node, values, types) if standard and _folds(node) else None
        if computed is None:
            kept.append(node)
            continue
        for name, array in zip(node.output, computed, strict=True):
            values[name] = numpy_helper.from_array(np.asarray(array), name)
            graph.initializer.append(values[name])
        folded = True
    if folded:  # the values' dims are now the initializers' (a declared value_info may hold fewer)
        del graph.node[:]
        graph.node.extend(kept)
        declared = [value for value in graph.value_info if value.name not in values]
        del graph.value_info[:]
        graph.value_info.extend(declared)
    return folded


def _has_data(tensor: onnx.TensorProto) -> bool:
    """Whether ``tensor`` holds its values (``without_weights`` keeps only the types and dims of large ones)."""
    fields = ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data")
    return math.prod(tensor.dims) == 0 or any(len(getattr(tensor, name)) for name in fields)


def _computed(
    model: onnx.ModelProto, node: onnx.NodeProto, values: dict[str, onnx.TensorProto], types: dict[str, ValueType]
) -> list[np.ndarray] | None:
    """The outputs of ``node`` where ONNX Runtime folds it and they are small, else None."""
    if node.op_type == "Shape":
        if not _static_shape(types, node.input[0]):
            return None
        dims = types[node.input[0]].dims
        start = attribute(node, "start", 0)
        end = attribute(node, "end", len(dims))
        return [np.array(dims[start:end], np.int64)]
    inputs = [name for name in node.input if name]
    if any(name not in values for name in inputs):
        return None
    if not all(_static_shape(types, o) and math.prod(types[o].dims) <= MATERIALIZED for o in node.output):
        return None
    single = onnx.helper.make_model(
        onnx.helper.make_graph(
            [node],
            "fold",
            [onnx.helper.make_tensor_value_info(name, values[name].data_type, values[name].dims) for name in inputs],
            [onnx.helper.make_tensor_value_info(name, 0, None) for name in node.output],
        ),
        opset_imports=list(model.opset_import),
        ir_version=model.ir_version,
    )
    try:
        feeds = {name: numpy_helper.to_array(values[name]) for name in inputs}
        return list(ReferenceEvaluator(single).run(None, feeds))
    except Exception:  # an operator the reference evaluator lacks, or one it computes otherwise: leave it
        return None


def memory(node: onnx.NodeProto, opset: int, types: dict[str, ValueType]) -> tuple[frozenset[int], frozenset[int]]:
    """Which inputs and which outputs of ``node`` the DirectML provider's kernel holds in CPU memory (a Reshape's
    shape, a Shape's output): ONNX Runtime copies no such value to or from the device for it."""
    kernel, _ = _kernel(node, opset, types)
    return (kernel.cpu_inputs if kernel else frozenset()), _kernels()[1].get(node.op_type, frozenset())
