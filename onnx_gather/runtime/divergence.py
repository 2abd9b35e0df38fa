"""``parity --all-tensors``: every intermediate value of a model marked as an output, and the first nodes, in
topological order, whose outputs differ from the reference's while their inputs agree (in the spirit of
Polygraphy's ``--onnx-outputs mark all``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

import onnx

from onnx_gather.graphs import model_io
from onnx_gather.graphs.plumbing import unnamed
from onnx_gather.graphs.types import value_types
from onnx_gather.runtime.backends import Model

NOTE = "marking every value as an output can change what a backend fuses, and so what it computes"


@contextlib.contextmanager
def marked(model: Model) -> Iterator[Model]:
    """``model`` with every typed value its main graph's nodes make added to its outputs, in a file beside the
    original (whose external data it shares), removed afterwards."""
    proto = onnx.ModelProto()
    proto.CopyFrom(model.proto)
    types = value_types(proto).get(0, {})
    present = {value.name for value in (*proto.graph.input, *proto.graph.output)}
    for node in proto.graph.node:
        for name in node.output:
            value_type = types.get(name)
            if name and name not in present and value_type is not None and value_type.elem_type:
                proto.graph.output.append(value_type.value_info(name))
                present.add(name)
    with model_io.temporary_copy(proto, model.path) as path:
        yield Model(path, proto)


def _on_cpu(placement: Mapping[str, dict], label: str) -> bool:
    """Whether the placement lists the node called ``label`` on ONNX Runtime's CPU provider."""
    return any(entry.endswith(f"({label})") for entry in placement.get("CPUExecutionProvider", {}).get("names", []))


def first_divergences(
    model: onnx.ModelProto, outputs: Mapping[str, Mapping[str, dict]], backend: str, placement: Mapping[str, dict],
    limit: int = 5,
) -> list[dict]:  # fmt: skip
    """The first ``limit`` nodes, in topological order, with an output outside tolerance on ``backend`` while every
    input of theirs that was compared is within it (graph inputs and weights are the same everywhere)."""
    within = {name: by[backend]["within_tolerance"] for name, by in outputs.items() if backend in by}
    found = []
    for position, node in enumerate(model.graph.node):
        bad = [name for name in node.output if within.get(name) is False]
        if not bad or not all(within.get(name, True) for name in node.input):
            continue
        comparison = outputs[bad[0]][backend]
        label = node.name or unnamed(node, position)  # as the dml backend names it for ONNX Runtime
        entry = {
            "node": label,
            "op_type": node.op_type,
            "output": bad[0],
            "max_abs": comparison["max_abs"],
            "max_rel": comparison["max_rel"],
            "mismatches": comparison["mismatches"],
        }
        if placement:
            entry["placement"] = "CPU" if _on_cpu(placement, label) else "DirectML"
        found.append(entry)
        if len(found) == limit:
            break
    return found
