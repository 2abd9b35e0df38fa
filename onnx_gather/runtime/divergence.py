"""``parity --all-tensors``: every intermediate value of a model marked as an output, and the first nodes, in
topological order, whose outputs differ from the reference's while their inputs agree (in the spirit of
Polygraphy's ``--onnx-outputs mark all``)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

import onnx

from onnx_gather.graphs.placement.nodes import Where
from onnx_gather.graphs.plumbing import is_constant, node_label
from onnx_gather.graphs.types import value_types
from onnx_gather.runtime.backends import Outcome
from onnx_gather.runtime.comparison import Comparison
from onnx_gather.runtime.model import Model, with_outputs

NOTE = "marking every value as an output can change what a backend fuses, and so what it computes"


def marked(model: Model, only: Collection[str] | None = None) -> Model:
    """``model`` with every typed value its main graph's nodes make (or those of them in ``only``) added to its
    outputs (``Model.marked``), but a Constant's: every backend holds it as the same constant, so it cannot differ
    (and ONNX Runtime, which makes it an initializer, may not return it)."""
    types = value_types(model.proto).get(0, {})
    present = {value.name for value in (*model.proto.graph.input, *model.proto.graph.output)}
    added = []
    for node in model.proto.graph.node:
        if is_constant(node):
            continue
        for name in node.output:
            value_type = types.get(name)
            wanted = only is None or name in only
            if wanted and name and name not in present and value_type is not None and value_type.elem_type:
                added.append(value_type.value_info(name))
                present.add(name)
    outputs = [*model.proto.graph.output, *added]
    return with_outputs(model, outputs, frozenset(value.name for value in added))


def _on_cpu(placement: Mapping[str, dict], label: str) -> bool:
    """Whether the placement lists the node called ``label`` on ONNX Runtime's CPU provider."""
    return any(entry.endswith(f"({label})") for entry in placement.get("CPUExecutionProvider", {}).get("names", []))


@dataclass(frozen=True)
class Divergence:
    """A node whose output differs beyond tolerance on a backend while its inputs agree."""

    node: str  # its name, or what reports call a node without one
    op_type: str
    output: str  # the first of its outputs that differs
    comparison: Comparison
    placement: Where | None  # where real DirectML ran it: DIRECTML or CPU; None for other backends


def first_divergences(
    model: onnx.ModelProto,
    outputs: Mapping[str, Mapping[str, Comparison]],
    backend: str,
    ran: Outcome,
    strict_ties: bool = False,
    limit: int = 5,
) -> list[Divergence]:
    """The first ``limit`` nodes, in topological order, with an output outside tolerance on ``backend`` (which
    computed ``ran``) while every input of theirs that was compared is within it (graph inputs and weights are the
    same everywhere); a node with an input the backend could not return is not judged. An output apart only by the
    order of tied keys counts as within tolerance unless ``strict_ties``."""
    within: dict[str, bool | None] = dict.fromkeys(ran.absent)
    within.update({name: by[backend].accepted(strict_ties) for name, by in outputs.items() if backend in by})
    placement = ran.placement
    found = []
    for position, node in enumerate(model.graph.node):
        bad = [name for name in node.output if within.get(name) is False]
        if not bad or not all(within.get(name, True) for name in node.input):
            continue
        label = node_label(node, position)  # as the dml backend names it for ONNX Runtime
        where = (Where.CPU if _on_cpu(placement, label) else Where.DIRECTML) if placement else None
        found.append(Divergence(label, node.op_type, bad[0], outputs[bad[0]][backend], where))
        if len(found) == limit:
            break
    return found
