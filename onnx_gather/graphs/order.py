"""The order of a model's nodes: ONNX Runtime runs a graph whatever order its nodes are listed in, so the
tools accept any order, put nodes in topological order, and refuse only cycles."""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import onnx

from onnx_gather.graphs.graph import Body, bodies, subgraphs


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
        uses = [set(node.input).union(*(free[id(graph)] for _, graph in subgraphs(node))) - {""} for node in body.nodes]
        if isinstance(body.container, onnx.GraphProto):
            free[id(body.container)] = _free_names(body.container, uses)
        yield _order(body, uses)


def sort_topologically(model: onnx.ModelProto) -> None:
    """Put every node list of ``model`` in topological order, in place; nodes in a cycle are left at the end."""
    for order in orders(model):
        if order.changed:
            nodes = list(order.body.nodes)
            order.body.replace_nodes([nodes[p] for p in order.sorted + order.cyclic])
