"""The exact yardstick: a model evaluated in float64, so that a backend's float32 result is judged by how far it is
from what the model means, not from another float32 run (``runtime.comparison``: within float error).

1. The model is widened (``graphs.widen``): FLOAT, FLOAT16 and BFLOAT16 values, weights, attributes and Casts become
   DOUBLE; an operand whose operator takes no DOUBLE keeps its own type.
2. Each node of the main graph has a route: ONNX Runtime's CPU kernels where one takes the node's types (read from
   ONNX Runtime's own kernel registry; a node holding subgraphs only where every node of them does too), else onnx's
   reference evaluator (Conv, ConvTranspose, Erf, Resize, the pools, ...: ONNX Runtime's CPU has them for float32
   only).
3. The nodes are run in topological order, in as few stretches of one route as the order allows (an ONNX Runtime
   session without graph optimizations, which would fuse and approximate, or the evaluator, for each); a stretch
   that ONNX Runtime refuses after all goes to the evaluator.
"""

from __future__ import annotations

import functools
import heapq
import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

from onnx_gather.graphs.plumbing import implicit_inputs, nested, orders, sort_topologically
from onnx_gather.graphs.types import ValueType, value_types
from onnx_gather.graphs.widen import type_text, widen
from onnx_gather.runtime import evaluator
from onnx_gather.runtime.sessions import quiet_options

ONNXRUNTIME = "onnxruntime"  # the routes
EVALUATOR = "evaluator"


class Unsupported(Exception):
    """A node neither ONNX Runtime's CPU kernels nor onnx's reference evaluator computes in float64."""


@dataclass
class Routes:
    """How the yardstick computed a model: op types by route (``onnxruntime``, ``evaluator``), the nodes kept in
    their own type with why, the stretches run, and the time it took."""

    ops: dict[str, Counter[str]] = field(default_factory=lambda: {ONNXRUNTIME: Counter(), EVALUATOR: Counter()})
    kept: dict[str, str] = field(default_factory=dict)
    stretches: int = 0
    seconds: float = 0.0


_Kernel = tuple[int, int, dict[str, list[str]]]
# Registered with DOUBLE in ONNX Runtime's CPU kernel registry, yet refused at run time ("LSTM operator does not
# support double yet": onnxruntime 1.20 to 1.32).
_REFUSE_DOUBLE_AT_RUN = frozenset({"LSTM", "GRU"})


class Erf(OpRun):
    """Erf in float64: onnx's own rounds it to float32 (``np.vectorize(erf, otypes=["f"])``, onnx 1.23)."""

    op_domain = ""

    def _run(self, x):  # noqa: ANN001
        return (np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype),)


_EVALUATOR_OPS = [*evaluator.EVALUATOR_OPS, Erf]


@functools.cache
def _kernels() -> dict[tuple[str, str], list[_Kernel]]:
    """ONNX Runtime's CPU kernels by (domain, op type): each one's since-version range and type constraints."""
    from onnxruntime.capi import _pybind_state

    table: dict[tuple[str, str], list[_Kernel]] = {}
    for kernel in _pybind_state.get_all_opkernel_def():
        if kernel.provider == "CPUExecutionProvider":
            start, end = kernel.version_range
            table.setdefault((kernel.domain, kernel.op_name), []).append((start, end, dict(kernel.type_constraints)))
    return table


def _domain(node: onnx.NodeProto) -> str:
    return "" if node.domain == "ai.onnx" else node.domain


def _takes(node: onnx.NodeProto, opsets: Mapping[str, int], types: Mapping[str, ValueType]) -> bool:
    """Whether a CPU kernel of ONNX Runtime takes ``node`` with the types ``types`` gives its values (those unknown
    are not held against it), and every node of its subgraphs."""
    domain = _domain(node)
    if node.op_type == "Constant" and domain == "":  # ONNX Runtime makes it an initializer: no kernel runs it
        return True
    try:
        schema = onnx.defs.get_schema(node.op_type, opsets.get(domain, 1), domain)
    except onnx.defs.SchemaError:  # an operator of ONNX Runtime's own (com.microsoft): its kernel, as it is
        return True
    bound = [
        (params[min(i, len(params) - 1)].type_str, name)
        for params, names in ((schema.inputs, node.input), (schema.outputs, node.output))
        if params
        for i, name in enumerate(names)
        if name
    ]

    def fits(constraints: Mapping[str, list[str]]) -> bool:
        for constraint, name in bound:
            known = types.get(name)
            if constraint in constraints and known is not None and known.elem_type:
                if type_text(known.elem_type) not in constraints[constraint]:
                    return False
        return True

    if domain == "" and node.op_type in _REFUSE_DOUBLE_AT_RUN:
        doubles = (types.get(name) for name in node.input)
        if any(known is not None and known.elem_type == onnx.TensorProto.DOUBLE for known in doubles):
            return False
    kernels = _kernels().get((domain, node.op_type), [])
    if not any(start <= schema.since_version <= end and fits(c) for start, end, c in kernels):
        return False
    return all(_takes(inner, opsets, types) for _, graph in nested(node) for inner in graph.node)


def _stretches(needs: Sequence[set[int]], routes: Sequence[str]) -> list[tuple[str, list[int]]]:
    """The nodes (``needs``: per node, the positions whose outputs it uses, as ``plumbing.Order`` has them) in
    stretches of one route, as few as the dependencies allow: Kahn's algorithm, taking ready nodes of the current
    route while there are any."""
    users: list[list[int]] = [[] for _ in needs]
    for position, need in enumerate(needs):
        for made in need:
            users[made].append(position)
    waiting = [len(need) for need in needs]
    ready: dict[str, list[int]] = {ONNXRUNTIME: [], EVALUATOR: []}
    for position, count in enumerate(waiting):
        if count == 0:
            heapq.heappush(ready[routes[position]], position)
    stretches: list[tuple[str, list[int]]] = []
    route = routes[0] if routes else ONNXRUNTIME
    while ready[ONNXRUNTIME] or ready[EVALUATOR]:
        if not ready[route]:
            route = EVALUATOR if route == ONNXRUNTIME else ONNXRUNTIME
        stretch: list[int] = []
        while ready[route]:
            position = heapq.heappop(ready[route])
            stretch.append(position)
            for user in users[position]:
                waiting[user] -= 1
                if waiting[user] == 0:
                    heapq.heappush(ready[routes[user]], user)
        stretches.append((route, stretch))
    return stretches


def _declared(name: str, types: Mapping[str, ValueType]) -> onnx.ValueInfoProto:
    known = types.get(name)
    if known is None or not known.elem_type:
        return helper.make_value_info(name, onnx.TypeProto())
    return helper.make_tensor_value_info(name, known.elem_type, None)


def _outside(nodes: Sequence[onnx.NodeProto]) -> set[str]:
    """The values ``nodes`` take from outside themselves (their subgraphs' too)."""
    made = {name for node in nodes for name in node.output}
    return set().union(*((set(node.input) | implicit_inputs(node)) for node in nodes)) - made - {""}


def _stretch_model(
    model: onnx.ModelProto, positions: list[int], wanted: set[str], types: Mapping[str, ValueType]
) -> onnx.ModelProto:
    """The nodes at ``positions`` as a model: what they take from outside as inputs (weights as weights), the values
    of theirs in ``wanted`` as outputs."""
    graph = model.graph
    nodes = [graph.node[p] for p in positions]
    used = _outside(nodes)
    weights = {tensor.name: tensor for tensor in graph.initializer}
    inputs = [_declared(name, types) for name in sorted(used) if name not in weights]
    outputs = [_declared(name, types) for node in nodes for name in node.output if name in wanted]
    result = helper.make_graph(nodes, graph.name, inputs, outputs, [weights[n] for n in sorted(used & set(weights))])
    stretch = helper.make_model(result, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    stretch.functions.extend(model.functions)
    return stretch


def _run_stretch(route: str, model: onnx.ModelProto, values: Mapping[str, np.ndarray]) -> tuple[str, dict]:
    """The outputs of ``model`` (a stretch) on ``route``, and the route it ran on: the evaluator where ONNX Runtime
    refuses the session after all (no kernel for a type the registry did not tell)."""
    feeds = {value.name: values[value.name] for value in model.graph.input}
    names = [value.name for value in model.graph.output]
    if route == ONNXRUNTIME:
        options = quiet_options()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL  # no fusion
        try:
            session = onnxruntime.InferenceSession(
                model.SerializeToString(), options, providers=["CPUExecutionProvider"]
            )
        except Exception:  # a kernel the registry promised does not take it: the evaluator computes it
            return _run_stretch(EVALUATOR, model, values)
        return route, dict(zip(names, session.run(names, feeds), strict=True))
    try:
        evaluator = ReferenceEvaluator(model, new_ops=_EVALUATOR_OPS)
    except (RuntimeError, NotImplementedError) as lacking:  # "No implementation for operator 'X' ... version 17"
        raise Unsupported(f"the exact yardstick cannot compute it: {str(lacking).splitlines()[0]}") from lacking
    with np.errstate(all="ignore"):  # an overflow to infinity is what float64 gives there, not a warning to print
        computed = evaluator.run(names, feeds)
    return route, dict(zip(names, (np.asarray(v) for v in computed), strict=True))


def _widened_feeds(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``feeds`` as the widened model takes them: FLOAT, FLOAT16 and BFLOAT16 arrays as float64."""
    return {name: np.asarray(a, np.float64) if _is_wide(a) else a for name, a in feeds.items()}


def _is_wide(array: np.ndarray) -> bool:
    return array.dtype.name in ("float32", "float16", "bfloat16")


def float64_outputs(
    model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], folder: Path | None = None
) -> tuple[dict[str, np.ndarray], Routes]:
    """Every output of ``model`` (standard ONNX; its external data in ``folder``) computed in float64 by the module's
    rules, and how."""
    start = time.perf_counter()
    widened = widen(model, folder)
    proto = widened.model
    sort_topologically(proto)
    types = value_types(proto)[0]
    opsets = {_domain(o): o.version for o in proto.opset_import}
    nodes = proto.graph.node
    (main,) = [order for order in orders(proto) if order.body.container is proto.graph]
    routes = [ONNXRUNTIME if _takes(node, opsets, types) else EVALUATOR for node in nodes]
    stretches = _stretches(main.needs, routes)
    outside = [_outside([nodes[p] for p in positions]) for _, positions in stretches]
    outputs = {value.name for value in proto.graph.output}
    later = Counter(name for used in outside for name in used)  # how many stretches to come use each value
    values = _widened_feeds(feeds)
    done = Routes(kept=widened.kept, stretches=len(stretches))
    for (route, positions), used in zip(stretches, outside, strict=True):
        made = {name for p in positions for name in nodes[p].output if name}
        stretch = _stretch_model(proto, positions, (set(later) | outputs) & made, types)
        ran, computed = _run_stretch(route, stretch, values)
        values.update(computed)
        done.ops[ran].update(nodes[p].op_type for p in positions)
        for name in used:
            later[name] -= 1
            if later[name] == 0:
                del later[name]
                if name not in outputs:
                    values.pop(name, None)  # no stretch to come uses it
    done.seconds = time.perf_counter() - start
    return {value.name: values[value.name] for value in proto.graph.output}, done
