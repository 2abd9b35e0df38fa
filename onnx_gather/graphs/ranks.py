"""Ranks ONNX shape inference cannot tell: from ONNX Runtime's symbolic shape inference (nothing runs), and what a
run tells where the caller asked for one (an ``Observer``, ``onnx_gather.runtime.observe``).

ONNX Runtime's DirectML provider decides with the real shapes when it runs; shape inference stops at contrib
operators and some standard ones. Only main-graph values can be observed in a run (a subgraph's or a function's
values are not outputs), and a rank that depends on which branch of an ``If`` runs is not taken from one run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import onnx
from onnx import helper

from onnx_gather.graphs.plumbing import node_label
from onnx_gather.graphs.types import ValueType, without_weights


class Observer(Protocol):
    """What runs a model to observe ranks (``onnx_gather.runtime.observe.Observation``): the converter asks it only
    when the caller gave one; this layer runs nothing."""

    def observe(self, model: onnx.ModelProto, names: Iterable[str]) -> Observed: ...


@dataclass
class Observed:
    """What one run told: the types (with this run's dims) of the values asked for, or why there are none."""

    types: dict[str, ValueType] = field(default_factory=dict)
    inputs: str = ""  # the inputs the run used, e.g. "images 1x3x1x1 (generated)"
    failure: str = ""


def branch_dependence(graph: onnx.GraphProto, name: str, types: Mapping[str, ValueType]) -> str | None:
    """The ``If`` node whose branch decides the rank of main-graph value ``name``, if any: an ancestor of unknown rank
    produced by an ``If`` whose branches do not both give outputs of one known rank."""
    producers = {out: (position, node) for position, node in enumerate(graph.node) for out in node.output}
    seen, stack = set(), [name]
    while stack:
        value = stack.pop()
        if value in seen or value not in producers:
            continue
        position, node = producers[value]
        seen.add(value)
        if node.op_type == "If" and node.domain in ("", "ai.onnx"):
            position = list(node.output).index(value)
            branches = {a.name: a.g for a in node.attribute if a.name in ("then_branch", "else_branch")}
            ranks = {_rank(g.output[position], types) for g in branches.values() if position < len(g.output)}
            if len(ranks) != 1 or None in ranks or len(branches) != 2:
                return node_label(node, position)
        stack.extend(i for i in node.input if i and (types.get(i) is None or types[i].rank is None))
    return None


def _rank(value: onnx.ValueInfoProto, types: Mapping[str, ValueType]) -> int | None:
    known = types.get(value.name) or ValueType.of(value)
    return None if known is None else known.rank


def symbolic_types(model: onnx.ModelProto, names: Iterable[str]) -> dict[str, ValueType]:
    """The types of main-graph values ``names`` that ONNX Runtime's symbolic shape inference tells (it knows the
    contrib operators ONNX's inference does not); those it cannot tell are left out. Runs nothing."""
    wanted = set(names)
    light = without_weights(model)
    # Weights whose data were left out become graph inputs of their type and dims: inference reads the data of
    # initializers, and needs only the dims of those.
    kept = [t for t in light.graph.initializer if t.raw_data or not t.dims or _has_data(t)]
    light.graph.input.extend(
        helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
        for t in light.graph.initializer
        if t not in kept
    )
    del light.graph.initializer[:]
    light.graph.initializer.extend(kept)
    inferred = _symbolic_inference(light)
    if inferred is None:
        return {}
    found = {}
    for value in (*inferred.graph.value_info, *inferred.graph.output):
        value_type = ValueType.of(value)
        if value.name in wanted and value_type is not None and value_type.rank is not None:
            found[value.name] = value_type
    return found


def _symbolic_inference(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """``SymbolicShapeInference.infer_shapes(model, auto_merge=True)`` without its one side effect: where it cannot
    finish, ONNX Runtime (1.32, ``tools/symbolic_shape_infer.py``) saves ``sym_shape_infer_temp.onnx`` and a
    ``<uuid>.data`` of its weights into the current folder before it raises. Its own steps, minus that save: nothing
    is written, and no ``chdir`` (process-wide) is needed. None where it cannot finish or fails."""
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference, get_opset  # only when ranks are wanted

    opset = get_opset(model)
    if not opset or opset < 7:
        return None  # infer_shapes: "Only support models of onnx opset 7 and above."
    inference = SymbolicShapeInference(2**31 - 1, True, False, 0)  # int_max, auto_merge, guess_output_rank, verbose
    try:
        inference._preprocess(model)
        complete = False
        while inference.run_:
            complete = inference._infer_impl()
        inference._update_output_from_vi()
    except Exception:
        return None
    return inference.out_mp_ if complete else None


def _has_data(tensor: onnx.TensorProto) -> bool:
    return any(
        len(getattr(tensor, field))
        for field in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data")
    )
