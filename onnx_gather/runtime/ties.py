"""Ties: an output that differs from the reference's only because sort-like nodes (TopK, ArgMax, ArgMin,
NonMaxSuppression) ordered keys equal within their tolerance otherwise, and what gathers by their indices followed
(``parity``'s TIED).

For one backend, the sort-like nodes of the main graph upstream of its differing outputs are looked at: their
indices on the backend (from its run where they are outputs, else a run with them marked as outputs) must be a valid
result of the node on the reference's keys when keys equal within tolerance may come in any order; and the
reference, run again with those nodes' results replaced by the backend's indices (TopK's values gathered from its
keys by them), must compute the backend's output within tolerance. Nodes in subgraphs are not looked at.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnx_gather.graphs.plumbing import Names, attribute, implicit_inputs, node_label
from onnx_gather.graphs.types import value_types
from onnx_gather.runtime import divergence
from onnx_gather.runtime.backends import Backend, Outcome
from onnx_gather.runtime.comparison import Tie, Tolerance, compare
from onnx_gather.runtime.model import Model

# The sort-like operators: the output that holds the indices and the input that holds the keys.
INDICES = {"TopK": 1, "ArgMax": 0, "ArgMin": 0, "NonMaxSuppression": 0}
KEYS = {"TopK": 0, "ArgMax": 0, "ArgMin": 0, "NonMaxSuppression": 1}


def _sorts(node: onnx.NodeProto) -> bool:
    return node.domain in ("", "ai.onnx") and node.op_type in INDICES


def _upstream(graph: onnx.GraphProto) -> dict[str, frozenset[int]]:
    """Per value the graph's nodes make (listed in topological order), the positions of the sort-like nodes it
    depends on."""
    found: dict[str, frozenset[int]] = {}
    for position, node in enumerate(graph.node):
        reached = frozenset().union(*(found.get(name, frozenset()) for name in (*node.input, *implicit_inputs(node))))
        reached |= {position} if _sorts(node) else frozenset()
        found.update(dict.fromkeys(node.output, reached))
    return found


def _gathered(node: onnx.NodeProto, keys: np.ndarray, indices: np.ndarray) -> np.ndarray | None:
    """The keys ``node``'s ``indices`` pick (one per index, or per selected row), or None where they are not a
    result it could give: out of range, or an index twice along TopK's axis."""
    if node.op_type == "NonMaxSuppression":
        rows = indices.reshape(-1, 3)
        if ((rows < 0) | (rows >= np.array(keys.shape)[[0, 1, 2]])).any():
            return None
        return keys[rows[:, 0], rows[:, 1], rows[:, 2]]
    axis = attribute(node, "axis", -1 if node.op_type == "TopK" else 0) % keys.ndim
    if node.op_type != "TopK" and not attribute(node, "keepdims", 1):
        indices = np.expand_dims(indices, axis)
    if indices.ndim != keys.ndim or ((indices < 0) | (indices >= keys.shape[axis])).any():
        return None
    if node.op_type == "TopK" and (np.diff(np.sort(indices, axis=axis), axis=axis) == 0).any():
        return None
    return np.take_along_axis(keys, indices.astype(np.int64), axis)


def _rows(node: onnx.NodeProto, differ: np.ndarray) -> tuple[int, ...]:
    """The positions where two results of ``node`` differ, as ``Tie.rows`` counts them."""
    if node.op_type == "NonMaxSuppression":
        return tuple(int(row) for row in np.flatnonzero(differ.reshape(len(differ), -1).any(axis=1)))
    if node.op_type == "TopK":
        axis = attribute(node, "axis", -1) % differ.ndim
        return tuple(int(row) for row in np.unique(np.nonzero(differ)[axis]))
    return tuple(int(position) for position in np.flatnonzero(differ))


def judged_tie(
    node: onnx.NodeProto, label: str, keys: np.ndarray, own: np.ndarray, theirs: np.ndarray, tolerance: Tolerance
) -> Tie | None:
    """Whether the indices ``theirs`` are a valid result of the sort-like ``node`` on ``keys``, of which it gave
    ``own``, when keys equal within ``tolerance`` may come in any order: the keys they pick, position by position,
    are within tolerance of those ``own`` picks (NonMaxSuppression: the same rows, each of the same batch and
    class). None where they are not; else the tie, with no rows where they are ``own``."""
    if own.shape != theirs.shape:
        return None
    differ = own != theirs
    if not differ.any():
        return Tie(label, node.op_type, (), 0.0)
    if node.op_type == "NonMaxSuppression" and (
        (own[:, :2] != theirs[:, :2]).any() or not np.array_equal(np.unique(own, axis=0), np.unique(theirs, axis=0))
    ):
        return None
    mine, yours = _gathered(node, keys, own), _gathered(node, keys, theirs)
    if mine is None or yours is None or not compare(mine, yours, tolerance).within_tolerance:
        return None
    gap = np.abs(mine.astype(np.float64) - yours.astype(np.float64))
    return Tie(label, node.op_type, _rows(node, differ), float(np.nan_to_num(gap).max()))


def _reordered(
    model: Model, sorts: list[int], theirs: Mapping[str, np.ndarray]
) -> tuple[Model, dict[str, tuple[str, str]]]:
    """``model`` with the results of the sort-like nodes at ``sorts`` replaced by graph inputs holding ``theirs``
    (TopK's values gathered from its keys by them), each node's own indices and its keys (unless fed or constant)
    made outputs. Returns it, and per value of ``theirs`` the graph input that holds it and the output that holds
    the node's own indices."""
    proto = onnx.ModelProto()
    proto.CopyFrom(model.proto)
    graph, names = proto.graph, Names(proto)
    types = value_types(model.proto).get(0, {})
    listed = {value.name for value in (*graph.input, *graph.output)} | {t.name for t in graph.initializer}
    renamed: dict[str, tuple[str, str]] = {}
    after: dict[int, list[onnx.NodeProto]] = {}
    outputs = list(graph.output)
    for position in sorts:
        node = graph.node[position]
        label, index = node_label(node, position), node.output[INDICES[node.op_type]]
        given, own = names.fresh(f"{index}_backend_order"), names.fresh(f"{index}_reference_order")
        renamed[index] = given, own
        graph.input.append(helper.make_tensor_value_info(given, onnx.TensorProto.INT64, theirs[index].shape))
        after[position] = [helper.make_node("Identity", [given], [index], names.fresh(f"{label}_order"))]
        if node.op_type == "TopK":
            gather = helper.make_node(
                "GatherElements",
                [node.input[0], index],
                [node.output[0]],
                names.fresh(f"{label}_values"),
                axis=attribute(node, "axis", -1),
            )
            after[position].append(gather)
            node.output[0] = names.fresh(f"{node.output[0]}_reference_order")
        node.output[INDICES[node.op_type]] = own
        outputs.append(helper.make_tensor_value_info(own, onnx.TensorProto.INT64, None))
        keys = node.input[KEYS[node.op_type]]
        if keys not in listed and keys in types:
            outputs.append(types[keys].value_info(keys))
            listed.add(keys)
    nodes = [each for position, node in enumerate(graph.node) for each in (node, *after.get(position, []))]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.output[:]
    graph.output.extend(outputs)
    added = {value.name for value in outputs} - set(model.output_names)
    return Model(model.path, proto, model.marked | added), renamed


def _known(model: Model, feeds: Mapping[str, np.ndarray], outcome: Outcome, name: str) -> np.ndarray:
    """The value ``name`` had in ``outcome``'s run: fed, a weight, or one of its outputs."""
    if name in feeds:
        return feeds[name]
    weights = {tensor.name: tensor for tensor in model.proto.graph.initializer}
    return numpy_helper.to_array(weights[name]) if name in weights else outcome.outputs[name]


def find_ties(
    model: Model,
    feeds: Mapping[str, np.ndarray],
    reference: Backend,
    backend: Backend,
    actual: Outcome,
    differing: Collection[str],
    tolerance: Tolerance,
) -> dict[str, tuple[Tie, ...]]:
    """Of ``differing``, values of ``model`` outside tolerance on ``backend`` (which computed ``actual``), those that
    differ from ``reference``'s only by the order of tied keys, with the sort-like nodes that ordered them otherwise.
    A run this needs that fails leaves the differences unexplained."""
    graph = model.proto.graph
    if not any(_sorts(node) for node in graph.node):
        return {}
    upstream = _upstream(graph)
    sorts = sorted(frozenset().union(*(upstream.get(name, frozenset()) for name in differing)))
    if not sorts:
        return {}
    nodes = {position: graph.node[position] for position in sorts}
    indices = {position: node.output[INDICES[node.op_type]] for position, node in nodes.items()}
    try:
        probed = actual
        if not all(name in actual.outputs for name in indices.values()):
            probed = backend.run(divergence.marked(model, list(indices.values())), feeds)
        theirs = {name: probed.outputs[name] for name in indices.values()}
        again, renamed = _reordered(model, sorts, theirs)
        rerun = reference.run(again, {**feeds, **{renamed[name][0]: array for name, array in theirs.items()}})
        judged = {}
        for position, node in nodes.items():
            keys = _known(model, feeds, rerun, node.input[KEYS[node.op_type]])
            own, index = rerun.outputs[renamed[indices[position]][1]], indices[position]
            judged[position] = judged_tie(node, node_label(node, position), keys, own, theirs[index], tolerance)
    except Exception:  # a run or a value it lacks: the differences stay unexplained
        return {}
    found = {}
    for name in differing:
        verdicts = [judged[position] for position in sorted(upstream.get(name, frozenset()))]
        ties = tuple(tie for tie in verdicts if tie is not None and tie.rows)
        if ties and None not in verdicts and name in rerun.outputs and name in actual.outputs:
            if compare(rerun.outputs[name], actual.outputs[name], tolerance).within_tolerance:
                found[name] = ties
    return found
