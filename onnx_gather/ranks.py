"""Ranks ONNX shape inference cannot tell, observed in one run of the model with ONNX Runtime.

ONNX Runtime's DirectML provider decides with the real shapes when it runs; shape inference stops at contrib
operators and some standard ones. The converter asks for the ranks it lacks here: the values become extra outputs
of one run on the given or generated inputs, and their ranks are read off. Only main-graph values can be observed
(a subgraph's or a function's values are not outputs), and a rank that depends on which branch of an ``If`` runs
is not taken from one run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from onnx_gather import inputs
from onnx_gather.graph import ValueType, without_weights


@dataclass(frozen=True)
class Observation:
    """How to run a model to observe ranks: inputs given (``feeds``) and the rest generated as ``run`` does."""

    feeds: Mapping[str, np.ndarray] = field(default_factory=dict)
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    seed: int = 0
    int_range: tuple[int, int] = (0, 4)
    folder: Path | None = None  # where the model's external data lies


@dataclass
class Observed:
    """What one run told: the types (with this run's dims) of the values asked for, or why there are none."""

    types: dict[str, ValueType] = field(default_factory=dict)
    inputs: str = ""  # the inputs the run used, e.g. "images 1x3x1x1 (generated)"
    failure: str = ""


def branch_dependence(graph: onnx.GraphProto, name: str, types: Mapping[str, ValueType]) -> str | None:
    """The ``If`` node whose branch decides the rank of main-graph value ``name``, if any: an ancestor of unknown rank
    produced by an ``If`` whose branches do not both give outputs of one known rank."""
    producers = {out: node for node in graph.node for out in node.output}
    seen, stack = set(), [name]
    while stack:
        value = stack.pop()
        node = producers.get(value)
        if value in seen or node is None:
            continue
        seen.add(value)
        if node.op_type == "If" and node.domain in ("", "ai.onnx"):
            position = list(node.output).index(value)
            branches = {a.name: a.g for a in node.attribute if a.name in ("then_branch", "else_branch")}
            ranks = {_rank(g.output[position], types) for g in branches.values() if position < len(g.output)}
            if len(ranks) != 1 or None in ranks or len(branches) != 2:
                return node.name or node.output[0]
        stack.extend(i for i in node.input if i and (types.get(i) is None or types[i].rank is None))
    return None


def _rank(value: onnx.ValueInfoProto, types: Mapping[str, ValueType]) -> int | None:
    known = types.get(value.name) or ValueType.of(value)
    return None if known is None else known.rank


def _describe(feeds: Mapping[str, np.ndarray], given: Iterable[str]) -> str:
    given = set(given)
    return ", ".join(
        f"{name} {inputs.dims_text(array.shape)} ({'given' if name in given else 'generated'})"
        for name, array in feeds.items()
    )


def symbolic_types(model: onnx.ModelProto, names: Iterable[str]) -> dict[str, ValueType]:
    """The types of main-graph values ``names`` that ONNX Runtime's symbolic shape inference tells (it knows the
    contrib operators ONNX's inference does not); those it cannot tell are left out. Runs nothing."""
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference  # only when ranks are wanted

    wanted = set(names)
    light = without_weights(model)
    # Weights whose data were left out become graph inputs of their type and dims: inference reads the data of
    # initializers, and needs only the dims of those.
    kept = [t for t in light.graph.initializer if t.raw_data or not t.dims or _has_data(t)]
    light.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                             for t in light.graph.initializer if t not in kept)  # fmt: skip
    del light.graph.initializer[:]
    light.graph.initializer.extend(kept)
    try:
        inferred = SymbolicShapeInference.infer_shapes(light, auto_merge=True)
    except Exception:
        return {}
    if inferred is None:
        return {}
    found = {}
    for value in (*inferred.graph.value_info, *inferred.graph.output):
        value_type = ValueType.of(value)
        if value.name in wanted and value_type is not None and value_type.rank is not None:
            found[value.name] = value_type
    return found


def _has_data(tensor: onnx.TensorProto) -> bool:
    return any(len(getattr(tensor, field)) for field in ("float_data", "int32_data", "int64_data", "double_data",
                                                          "uint64_data", "string_data"))  # fmt: skip


def observe(model: onnx.ModelProto, names: Iterable[str], observation: Observation) -> Observed:
    """Run ``model`` once with ONNX Runtime's CPU provider and read the ranks of main-graph values ``names``."""
    names = list(dict.fromkeys(names))
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    declared = {o.name for o in probe.graph.output}
    probe.graph.output.extend(helper.make_value_info(n, onnx.TypeProto()) for n in names if n not in declared)
    try:
        feeds = inputs.generate(model, observation.shapes, observation.seed, observation.int_range, observation.feeds)
    except inputs.InputError as error:
        return Observed(failure=f"no inputs to run it on: {error}")
    described = _describe(feeds, observation.feeds)
    import onnxruntime  # only when a run is asked for: the conversion itself imports no runtime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4
    if observation.folder is not None:
        options.add_session_config_entry(
            "session.model_external_initializers_file_folder_path", str(observation.folder)
        )
    try:
        session = onnxruntime.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
        arrays = session.run(names, feeds)
    except Exception as error:  # ONNX Runtime raises several types; its message says what failed
        message = " ".join(str(error).split())
        hint = inputs.dynamic_hint(model, observation.shapes, list(observation.feeds))
        failure = f"a run of ONNX Runtime on {described} failed: {message}" + (f"; {hint}" if hint else "")
        return Observed(inputs=described, failure=failure)
    types = {
        name: ValueType(helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype), np.shape(a))
        for name, a in zip(names, arrays, strict=True)
    }
    return Observed(types, described)
