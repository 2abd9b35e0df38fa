"""Where ONNX Runtime's DirectML session runs a model, as the session ends up: every node of the optimized graph
(``runtime.session_graph``) placed, DirectML's activation fusion, the partitions of DirectML nodes and the memory
copies ONNX Runtime inserts between DirectML and the CPU, and what became of each node of the model.

* Activation fusion (the provider's ``GraphTransformer::PerformOperatorFusion``, on the main graph only): a DirectML
  Conv, ConvTranspose, BatchNormalization, InstanceNormalization, MeanVarianceNormalization, Gemm, MatMul, Add or
  two-input Sum whose output feeds exactly one DirectML node, a one-input activation (Add and Sum: only Relu and
  LeakyRelu), becomes one ``com.microsoft.dml`` ``DmlFused<Op>`` node (ONNX Runtime names it ``fused op (#i 'a') +
  (#j 'b')`` by its node indices; here ``fused op ('a') + ('b')``).
* Memory copies (``TransformerMemcpyImpl``): one ``MemcpyToHost`` for each value DirectML makes in device memory that
  a CPU provider node takes, or a DirectML kernel takes in CPU memory; one ``MemcpyFromHost`` for each value made in
  CPU memory that a DirectML kernel takes in device memory. Graph inputs, initializers and a subgraph's outer values
  are copied as the session runs, by no node.
* A partition: DirectML nodes joined by values that stay in device memory. Where every shape is static, DirectML's
  graph fusion compiles each into one ``DmlFusedNode``; each boundary between partitions is a copy or a CPU node.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import onnx

from onnx_gather.graphs.placement import nodes as placement
from onnx_gather.graphs.placement.nodes import Where
from onnx_gather.graphs.plumbing import Body, bodies, implicit_inputs, is_constant, node_label
from onnx_gather.graphs.types import value_types, without_weights

_FUSABLE = {
    "Conv": (),
    "ConvTranspose": (),
    "BatchNormalization": (),
    "InstanceNormalization": (),
    "MeanVarianceNormalization": (),
    "Gemm": (),
    "MatMul": (),
    "Add": ("Relu", "LeakyRelu"),
    "Sum": ("Relu", "LeakyRelu"),
}
_ACTIVATIONS = frozenset(
    {
        "Sigmoid",
        "HardSigmoid",
        "Tanh",
        "ScaledTanh",
        "Relu",
        "LeakyRelu",
        "PRelu",
        "ThresholdedRelu",
        "Elu",
        "Selu",
        "Softsign",
        "Softplus",
        "ParametricSoftplus",
        "Dropout",
    }
)


class Fate(StrEnum):
    """What became of one node of the model in the session."""

    RUNS = "runs"  # as itself
    FUSED = "fused"  # into another node, which runs
    CONSTANT = "made an initializer"
    FOLDED = "folded"  # computed once as the session is created
    REMOVED = "removed"  # by an optimization that drops it (Identity, Dropout, a no-op Slice...)


@dataclass(frozen=True)
class Ran:
    """One node of the session's graph: where it runs and why, and the model's nodes it stands for if it is a
    fusion of theirs."""

    name: str
    op_type: str
    where: str
    placed: placement.Placed
    fused_from: tuple[str, ...] = ()


@dataclass(frozen=True)
class Copy:
    """One memory copy ONNX Runtime inserts: the value, toward which side, the node that makes it and those that
    take it on the other side."""

    where: str  # the graph
    value: str
    to: Where  # CPU (MemcpyToHost) or DIRECTML (MemcpyFromHost)
    producer: str
    consumers: tuple[str, ...]

    @property
    def op_type(self) -> str:
        return "MemcpyToHost" if self.to == Where.CPU else "MemcpyFromHost"


@dataclass(frozen=True)
class Link:
    """One value of the session's graph that one of its nodes makes and another takes (copied or not)."""

    where: str  # the graph
    value: str
    producer: str
    consumer: str


@dataclass(frozen=True)
class Session:
    """The session's nodes, what became of each node of the model (by graph and name: its fate and, where fused,
    the node it went into), the DirectML partitions (names of their nodes), the copies, and the values that join
    its nodes (each producer and consumer once a value)."""

    nodes: tuple[Ran, ...]
    fates: dict[tuple[str, str], tuple[Fate, str]]
    partitions: tuple[tuple[str, ...], ...]
    copies: tuple[Copy, ...]
    links: tuple[Link, ...] = ()


def _label(node: onnx.NodeProto) -> str:
    return node.name or f"{node.op_type} -> {node.output[0] if node.output else ''}"


def session(model: onnx.ModelProto, optimized: onnx.ModelProto) -> Session:
    """The session of ``model`` whose optimized graph (``runtime.session_graph.optimized``) is ``optimized``."""
    placed = placement.place_nodes(optimized)
    types = value_types(without_weights(optimized), propagate=True)
    ran: list[Ran] = []
    partitions: list[tuple[str, ...]] = []
    copies: list[Copy] = []
    links: list[Link] = []
    for index, body in enumerate(bodies(optimized)):
        graph_nodes, graph_ran = _fuse_activations(body, placed[body.where], index == 0)
        ran.extend(graph_ran)
        found = _partitions_and_copies(body, graph_nodes, graph_ran, types.get(body.scope, {}))
        partitions.extend(found[0])
        copies.extend(found[1])
        links.extend(found[2])
    return Session(tuple(ran), _fates(model, optimized, ran), tuple(partitions), tuple(copies), tuple(links))


def _fuse_activations(
    body: Body, verdicts: list[placement.Placed], main: bool
) -> tuple[list[onnx.NodeProto], list[Ran]]:
    """The nodes of ``body`` once DirectML's activation fusion has run (in the ``main`` graph only), each with its
    placement."""
    nodes = list(body.nodes)
    consumers: dict[str, list[int]] = {}
    for position, node in enumerate(nodes):
        for name in (*node.input, *implicit_inputs(node)):
            consumers.setdefault(name, []).append(position)
    outputs = {value.name for value in body.container.output} if isinstance(body.container, onnx.GraphProto) else set()
    on_dml = [v.provider == Where.DIRECTML and main for v in verdicts]
    taken: dict[int, int] = {}  # activation position -> fusable position
    for position, node in enumerate(nodes):
        allowed = _FUSABLE.get(node.op_type)
        if allowed is None or node.domain not in ("", "ai.onnx") or not on_dml[position] or len(node.output) != 1:
            continue
        if node.op_type == "Sum" and len(node.input) != 2:
            continue
        users = consumers.get(node.output[0], [])
        if len(users) != 1 or node.output[0] in outputs or position in taken.values() or position in taken:
            continue
        activation = nodes[users[0]]
        if (
            on_dml[users[0]]
            and users[0] not in taken
            and activation.op_type in _ACTIVATIONS
            and activation.domain in ("", "ai.onnx")
            and len(activation.input) == 1
            and (not allowed or activation.op_type in allowed)
        ):
            taken[users[0]] = position
    fused_into = {fusable: activation for activation, fusable in taken.items()}
    result_nodes, result = [], []
    for position, node in enumerate(nodes):
        if position in fused_into:
            continue
        if position in taken:
            first = nodes[taken[position]]
            name = f"fused op ('{first.name}') + ('{node.name}')"
            fused = onnx.helper.make_node(
                f"DmlFused{first.op_type}", list(first.input), list(node.output), name=name, domain="com.microsoft.dml"
            )
            result_nodes.append(fused)
            result.append(Ran(name, fused.op_type, body.where, verdicts[taken[position]], (first.name, node.name)))
        else:
            result_nodes.append(node)
            result.append(Ran(_label(node), node.op_type, body.where, verdicts[position]))
    return result_nodes, result


def _partitions_and_copies(
    body: Body, nodes: list[onnx.NodeProto], ran: list[Ran], types: dict
) -> tuple[list[tuple[str, ...]], list[Copy], list[Link]]:
    """The DirectML partitions, the memory copies and the links of one graph."""
    running = [r.placed.why.runs for r in ran]
    on_dml = [r.placed.provider == Where.DIRECTML and run for r, run in zip(ran, running, strict=True)]
    made: dict[str, tuple[int, bool]] = {}  # value -> (producer, in device memory)
    for position, node in enumerate(nodes):
        if not running[position]:
            continue
        cpu_outputs = placement.memory(node, body.opset, types)[1] if on_dml[position] else frozenset()
        for index, name in enumerate(node.output):
            if name:
                made[name] = (position, on_dml[position] and index not in cpu_outputs)
    needs: dict[str, dict[bool, list[int]]] = {}  # value -> in device memory? -> consumers
    for position, node in enumerate(nodes):
        if not running[position]:
            continue
        cpu_inputs = placement.memory(node, body.opset, types)[0] if on_dml[position] else frozenset()
        taken = [(i, name) for i, name in enumerate(node.input) if name]
        taken += [(len(node.input), name) for name in sorted(implicit_inputs(node))]
        for index, name in taken:
            if name not in made:
                continue
            device = on_dml[position] and index not in cpu_inputs
            needs.setdefault(name, {}).setdefault(device, []).append(position)
    copies, links = [], []
    for name, wanted in needs.items():
        producer, in_device = made[name]
        takers = dict.fromkeys(p for consumers in wanted.values() for p in consumers)
        links += [Link(body.where, name, ran[producer].name, ran[p].name) for p in takers]
        other = wanted.get(not in_device)
        if other:
            copies.append(
                Copy(
                    body.where,
                    name,
                    Where.CPU if in_device else Where.DIRECTML,
                    ran[producer].name,
                    tuple(ran[p].name for p in other),
                )
            )
    return _partitions(nodes, ran, on_dml, made, needs), copies, links


def _partitions(
    nodes: list[onnx.NodeProto],
    ran: list[Ran],
    on_dml: list[bool],
    made: dict[str, tuple[int, bool]],
    needs: dict[str, dict[bool, list[int]]],
) -> list[tuple[str, ...]]:
    """DirectML's partitions of one graph: in topological order, a DirectML node joins the partitions of the DirectML
    nodes whose values it takes in device memory, unless a path through a node outside them leads back into one of
    them (a partition runs as one: it cannot wait on a CPU node that waits on it)."""
    inputs: dict[int, list[tuple[int, bool]]] = {}  # node -> (producer, joined in device memory)
    for name, wanted in needs.items():
        producer, in_device = made[name]
        for device, consumers in wanted.items():
            for consumer in consumers:
                inputs.setdefault(consumer, []).append((producer, device and in_device and on_dml[producer]))
    parent: dict[int, int] = {}

    def root(partition: int) -> int:
        while parent[partition] != partition:
            parent[partition] = parent[parent[partition]]
            partition = parent[partition]
        return partition

    partition: dict[int, int] = {}  # DirectML node -> its partition (by union-find root)
    after: dict[int, set[int]] = {}  # node -> the partitions it waits on, at any depth
    beyond: dict[int, set[int]] = {}  # partition -> the partitions its members wait on through outside nodes
    for position in range(len(nodes)):
        taken = inputs.get(position, [])
        waits = set()
        for producer, _ in taken:
            waits |= {root(p) for p in after.get(producer, ())}
            if producer in partition:
                waits.add(root(partition[producer]))
        after[position] = waits
        if not on_dml[position]:
            continue
        outside = set()  # partitions reached through a producer that does not join
        joined = []
        for producer, joins in taken:
            if joins:
                joined.append(root(partition[producer]))
            else:
                outside |= {root(p) for p in after.get(producer, ())}
                if producer in partition:
                    outside.add(root(partition[producer]))
        chosen: list[int] = []
        for candidate in dict.fromkeys(joined):
            blocked = outside | {root(p) for c in chosen for p in beyond[c]}
            if candidate not in blocked and not any(root(p) in chosen for p in beyond[candidate]):
                chosen.append(candidate)
                outside |= {root(p) for p in beyond[candidate]}
        parent[position] = position
        beyond[position] = outside
        for candidate in chosen:
            parent[candidate] = position
            beyond[position] |= beyond[candidate]
        partition[position] = position
    groups: dict[int, list[str]] = {}
    for position in partition:
        groups.setdefault(root(position), []).append(ran[position].name)
    return [tuple(group) for group in groups.values()]


def _fused_into(
    node: onnx.NodeProto,
    where: str,
    produced: dict[tuple[str, str], tuple[str, str]],
    consumers: dict[str, list[onnx.NodeProto]],
    kept: set[str],
) -> str:
    """The node one of ONNX Runtime's fusions made of ``node`` and others: the first node ahead of it, through nodes
    of the model that the optimized graph lacks too, that makes one of the model's values and is not one of the
    model's nodes ("" where none is: ``node`` was removed, its users take its input)."""
    seen, ahead = set(), list(node.output)
    while ahead:
        value = ahead.pop(0)
        made = produced.get((where, value))
        if made is not None and made[1] not in kept:
            return made[1]
        for taker in consumers.get(value, ()):
            if id(taker) not in seen and taker.name not in kept:
                seen.add(id(taker))
                ahead.extend(taker.output)
    return ""


def _fates(
    model: onnx.ModelProto, optimized: onnx.ModelProto, ran: list[Ran]
) -> dict[tuple[str, str], tuple[Fate, str]]:
    """What became of each node of ``model``, by its graph and ``node_label``: its fate and the session node it runs
    as or in. A node is found in the session by its name, a nameless one by its op type and outputs."""
    runs = {(r.where, r.name) for r in ran}
    inside = {(r.where, name): r.name for r in ran for name in r.fused_from}
    produced: dict[tuple[str, str], tuple[str, str]] = {}  # (graph, value) -> (op type, session node)
    constants: set[tuple[int, str]] = set()
    optimized_names = {node.name for body in bodies(optimized) for node in body.nodes}
    for body in bodies(optimized):
        if isinstance(body.container, onnx.GraphProto):
            constants.update((body.scope, t.name) for t in body.container.initializer)
        for node in body.nodes:
            label = _label(node)
            for output in node.output:
                produced[(body.where, output)] = (node.op_type, inside.get((body.where, label), label))
    fates: dict[tuple[str, str], tuple[Fate, str]] = {}
    for body in bodies(model):
        if body.scope != 0:  # a model-local function: ONNX Runtime inlines its calls' bodies
            continue
        originals = {node.name for node in body.nodes if node.name}
        kept = originals & optimized_names
        consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in body.nodes:
            for name in node.input:
                consumers.setdefault(name, []).append(node)

        for position, node in enumerate(body.nodes):
            key, named = (body.where, node_label(node, position)), (body.where, node.name)
            made = [produced[(body.where, o)] for o in node.output if (body.where, o) in produced]
            if is_constant(node):
                fates[key] = (Fate.CONSTANT, "")
            elif node.name and named in inside:
                fates[key] = (Fate.FUSED, inside[named])
            elif node.name and named in runs:
                fates[key] = (Fate.RUNS, node.name)
            elif not node.name and made and made[0][0] == node.op_type and made[0][1] == _label(node):
                fates[key] = (Fate.RUNS, made[0][1])
            elif node.output and all((body.scope, o) in constants for o in node.output if o):
                fates[key] = (Fate.FOLDED, "")
            elif made:
                fates[key] = (Fate.FUSED, made[0][1])
            elif into := _fused_into(node, body.where, produced, consumers, kept):
                fates[key] = (Fate.FUSED, into)
            else:
                fates[key] = (Fate.REMOVED, "")
    return fates
