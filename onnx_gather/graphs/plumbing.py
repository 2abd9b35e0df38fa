"""The graph plumbing the converter, the lowering and the checks share, hand-made on ONNX's protobufs: every node
list of a model (subgraphs and functions included), fresh names, topological order and cycles, def-use links and the
removal of helpers no node uses any more.

onnx-ir offers all of these; measured on the 10,000-gather chain of ``tools/convert_speed.py``, converting to its
IR and back alone costs about what the whole conversion costs now, and its deserialisation grows faster than the
node count on lowered graphs (docs/design.md, "Hand-made, and why"). So they stay here, in one small module.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from onnx_gather.core import contract


@dataclass
class Body:
    """A node list a rewrite may change: the main graph, a subgraph, or a model-local function."""

    container: onnx.GraphProto | onnx.FunctionProto
    opset: int  # the default domain's version in force here
    where: str  # for messages: "graph 'main'", "function 'local.F'", "subgraph 'body' of node 'loop'"
    scope: int  # bodies sharing a scope share value names: the main graph and its subgraphs; each function

    @property
    def nodes(self) -> Sequence[onnx.NodeProto]:
        return self.container.node

    def replace_nodes(self, nodes: list[onnx.NodeProto]) -> None:
        del self.container.node[:]
        self.container.node.extend(nodes)


# Operators that draw new values on every run (ONNX's random generators; Bernoulli from opset 15).
RANDOM_OPS = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}
)


def random_nodes(model: onnx.ModelProto) -> list[str]:
    """The nodes of ``model`` (subgraphs included) that draw random values, as ``Op 'name'``."""
    return [
        f"{node.op_type} {node_label(node, position)!r}"
        for body in bodies(model)
        for position, node in enumerate(body.nodes)
        if node.domain in ("", "ai.onnx") and node.op_type in RANDOM_OPS
    ]


def is_constant(node: onnx.NodeProto) -> bool:
    """Whether ``node`` is ONNX's Constant: a value every runtime holds as it is (ONNX Runtime makes it an
    initializer as it loads the model)."""
    return node.op_type == "Constant" and node.domain in ("", "ai.onnx")


def node_label(node: onnx.NodeProto, position: int) -> str:
    """What reports call a node: its name, or where it has none its op type and position in its graph."""
    return node.name or f"{node.op_type} #{position}"


def attribute(node: onnx.NodeProto, name: str, default: object = None) -> object:
    """The value of ``node``'s attribute ``name`` (a string attribute as ``str``), or ``default`` where it has none."""
    found = next((a for a in node.attribute if a.name == name), None)
    if found is None:
        return default
    value = onnx.helper.get_attribute_value(found)
    return value.decode() if isinstance(value, bytes) else value


def referenced_attribute(node: onnx.NodeProto) -> str:
    """Why ``node`` (in a model-local function) cannot be judged alone: an attribute of it that refers to the
    function's (its value comes with each call); "" where none does."""
    found = next((a for a in node.attribute if a.ref_attr_name), None)
    if found is None:
        return ""
    return f"its {found.name} is the function's attribute {found.ref_attr_name!r}, whose value each call gives"


def subgraphs(node: onnx.NodeProto) -> Iterator[tuple[str, onnx.GraphProto]]:
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            yield attribute.name, attribute.g
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            yield from ((attribute.name, g) for g in attribute.graphs)


# The standard ops whose attributes hold graphs (every other standard op's schema takes none, nor do the DML ops):
# the walk reads the attributes of these and of other domains' nodes only, a third of its time on a 30,000-node model.
CONTROL_FLOW = frozenset({"If", "Loop", "Scan", "SequenceMap"})


def may_hold_graphs(node: onnx.NodeProto) -> bool:
    """Whether ``node``'s op can take graph attributes (``validate`` refuses graphs on the others)."""
    if node.domain in ("", "ai.onnx"):
        return node.op_type in CONTROL_FLOW
    return not contract.is_dml(node)


def nested(node: onnx.NodeProto) -> Iterator[tuple[str, onnx.GraphProto]]:
    """The subgraphs of ``node`` the walk goes into: ``subgraphs`` of the ops that take graphs."""
    return subgraphs(node) if may_hold_graphs(node) else iter(())


def _opset(imports: Sequence[onnx.OperatorSetIdProto], default: int) -> int:
    return next((o.version for o in imports if o.domain in ("", "ai.onnx")), default)


def bodies(model: onnx.ModelProto) -> list[Body]:
    """Every node list of the model, subgraphs at any depth included (no recursion: depth is unbounded).

    Each body comes before its subgraphs. A rewrite goes through them in reverse, subgraphs first: replacing
    a body's nodes copies them, subgraphs included, so a subgraph must be final before its parent is rebuilt.
    """
    model_opset = _opset(model.opset_import, 0)
    roots = [Body(model.graph, model_opset, f"graph {model.graph.name!r}", 0)]
    for index, function in enumerate(model.functions, start=1):
        opset = _opset(function.opset_import, model_opset)
        roots.append(Body(function, opset, f"function '{function.domain}.{function.name}'", index))
    found, stack = [], list(reversed(roots))
    while stack:
        body = stack.pop()
        found.append(body)
        for position, node in enumerate(body.nodes):
            stack.extend(inner_bodies(body, node, position))
    return found


def inner_bodies(body: Body, node: onnx.NodeProto, position: int) -> list[Body]:
    """The subgraphs of ``node`` (at ``position`` in ``body``) the walk goes into, as bodies of the same opset and
    scope."""
    label = node_label(node, position)
    return [
        Body(graph, body.opset, f"subgraph {name!r} of node {label!r} in {body.where}", body.scope)
        for name, graph in nested(node)
    ]


def graphs(model: onnx.ModelProto) -> Iterator[onnx.GraphProto]:
    for body in bodies(model):
        if isinstance(body.container, onnx.GraphProto):
            yield body.container


class Names:
    """Fresh value and node names, unique across the whole model."""

    def __init__(self, model: onnx.ModelProto) -> None:
        used: set[str] = set()
        for body in bodies(model):
            for node in body.nodes:
                used.update(node.input, node.output, (node.name,))
            container = body.container
            if isinstance(container, onnx.GraphProto):
                used.update(v.name for v in (*container.input, *container.output, *container.value_info))
                used.update(t.name for t in container.initializer)
            else:
                used.update(container.input, container.output)
        self._used = used

    def fresh(self, base: str) -> str:
        name, count = base, 0
        while name in self._used:
            count += 1
            name = f"{base}_{count}"
        self._used.add(name)
        return name


@dataclass
class Order:
    """The nodes of one body: their positions in topological order, and those left over because of a cycle."""

    body: Body
    sorted: list[int]  # stable: nodes that are already in order keep it
    cyclic: list[int]  # in a cycle, or after one; in their listed order
    needs: list[set[int]]  # per node, the positions of the nodes whose outputs it uses

    @property
    def changed(self) -> bool:
        return self.cyclic != [] or self.sorted != list(range(len(self.sorted)))

    def cycle(self) -> list[int]:
        """One cycle among the left-over nodes, as positions in dependency order (each needs the next)."""
        left = set(self.cyclic)
        path, seen = [self.cyclic[0]], {self.cyclic[0]: 0}
        while True:
            step = min(p for p in self.needs[path[-1]] if p in left)  # every left-over node needs another one
            if step in seen:
                return path[seen[step] :]
            seen[step] = len(path)
            path.append(step)


def _free_names(graph: onnx.GraphProto, uses: Sequence[set[str]]) -> set[str]:
    """The names a graph takes from enclosing graphs: used by its nodes (``uses``) or outputs, defined nowhere in it."""
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined.update(name for node in graph.node for name in node.output)
    used = set().union(*uses) | {v.name for v in graph.output}
    return used - defined - {""}


def implicit_inputs(node: onnx.NodeProto) -> set[str]:
    """The names ``node``'s subgraphs take from the graph that holds it, at any depth."""
    taken: set[str] = set()
    for _, graph in nested(node):
        taken |= _free_names(graph, [set(inner.input) | implicit_inputs(inner) for inner in graph.node])
    return taken


def needed_nodes(graph: onnx.GraphProto, names: Iterable[str]) -> list[onnx.NodeProto]:
    """The nodes of ``graph`` that computing ``names`` takes (their producers, and theirs, subgraphs' outer names
    included), in the graph's order."""
    producer = {out: position for position, node in enumerate(graph.node) for out in node.output}
    wanted, needed = [name for name in names if name in producer], set()
    while wanted:
        position = producer.get(wanted.pop())
        if position is None or position in needed:
            continue
        needed.add(position)
        node = graph.node[position]
        wanted.extend(name for name in (*node.input, *implicit_inputs(node)) if name)
    return [node for position, node in enumerate(graph.node) if position in needed]


def _order(body: Body, uses: list[set[str]]) -> Order:
    """Kahn's algorithm, taking the ready node listed first each time."""
    nodes = body.nodes
    producer: dict[str, int] = {}
    for position, node in enumerate(nodes):
        for name in node.output:
            if name:
                producer.setdefault(name, position)
    needs = [{producer[name] for name in names if name in producer} for names in uses]
    waiting = [len(need) for need in needs]
    users: list[list[int]] = [[] for _ in nodes]
    for position, need in enumerate(needs):
        for producing in need:
            users[producing].append(position)
    ready = [position for position, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    done = []
    while ready:
        position = heapq.heappop(ready)
        done.append(position)
        for user in users[position]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, user)
    return Order(body, done, [p for p, count in enumerate(waiting) if count > 0], needs)


def orders(model: onnx.ModelProto) -> Iterator[Order]:
    """The order of every node list of the model, subgraphs before the graphs that hold them.

    A node that holds subgraphs needs what they take from its graph (implicit inputs), as ONNX Runtime sees it.
    """
    free: dict[int, set[str]] = {}
    for body in reversed(bodies(model)):
        uses = [set(node.input).union(*(free[id(graph)] for _, graph in nested(node))) - {""} for node in body.nodes]
        if isinstance(body.container, onnx.GraphProto):
            free[id(body.container)] = _free_names(body.container, uses)
        yield _order(body, uses)


def sort_topologically(model: onnx.ModelProto) -> None:
    """Put every node list of ``model`` in topological order, in place; nodes in a cycle are left at the end."""
    for order in orders(model):
        if order.changed:
            nodes = list(order.body.nodes)
            order.body.replace_nodes([nodes[p] for p in order.sorted + order.cyclic])


def use_counts(model: onnx.ModelProto) -> dict[int, Counter]:
    """How often each value is used per scope: by nodes (subgraphs included) and as a graph output."""
    uses: dict[int, Counter] = {}
    for body in bodies(model):
        counter = uses.setdefault(body.scope, Counter())
        for node in body.nodes:
            counter.update(name for name in node.input if name)
        outputs = body.container.output
        counter.update(o if isinstance(o, str) else o.name for o in outputs)
    return uses


class DefUse:
    """One node list being rewritten: who produces what, who uses it, and which nodes the rewrite removes."""

    def __init__(self, body: Body, uses: Counter, ir_version: int) -> None:
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
        self.initializers: dict[str, onnx.TensorProto] = {}
        if isinstance(body.container, onnx.GraphProto):
            self.initializers = {t.name: t for t in body.container.initializer}
            if ir_version >= 4:  # an initializer that is also a graph input is a default, which a feed overrides
                for value in body.container.input:
                    self.initializers.pop(value.name, None)

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
        if node is None or not is_constant(node) or len(node.attribute) != 1:
            return None
        attribute = node.attribute[0]
        if attribute.name == "value":
            return numpy_helper.to_array(attribute.t)
        if attribute.name == "value_ints":
            return np.array(attribute.ints, np.int64)
        return None

    def remove(self, node: onnx.NodeProto, keep: str, helpers: Collection[str]) -> None:
        """Remove ``node`` and, transitively, the nodes of the op types ``helpers`` that only it uses (axes, slice
        ends), but not what produces ``keep``."""
        stack = [node]
        while stack:
            current = stack.pop()
            self.removed.add(self.position[id(current)])
            for name in current.input:
                producer = None if name in (keep, "") else self.private_producer(name)
                if producer is not None and producer.op_type in helpers:
                    stack.append(producer)
