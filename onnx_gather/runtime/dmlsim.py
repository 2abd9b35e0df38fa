"""The ``dmlsim`` backend's failures and notes: what DirectML would raise where a rule says it fails, what of its
outputs the emulation cannot vouch for (``graphs.emulate``), and the types ONNX Runtime's Python binding cannot carry,
which DirectML's runner does, carried in wider ones."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto

from onnx_gather.core.words import counted
from onnx_gather.graphs.emulate import Emulation, Fault
from onnx_gather.graphs.placement import known
from onnx_gather.graphs.placement.nodes import At
from onnx_gather.graphs.plumbing import Names
from onnx_gather.graphs.types import numpy_type


class EmulatedFailure(RuntimeError):
    """DirectML's failure as ``dmlsim`` emulates it: ``fault`` says where, which rule and how."""

    def __init__(self, fault: Fault) -> None:
        self.fault = fault
        code = f"{fault.failure.hresult} " if fault.failure.hresult else ""
        by = f"rule {fault.rule}" if fault.rule else "where the provider puts the gather"
        super().__init__(
            f"DirectML (emulated by dmlsim) fails {fault.failure.at}: {code}at node {fault.node!r} ({by}): {fault.what}"
        )


def raise_at_creation(emulation: Emulation) -> None:
    """The first failure the graph decides, as DirectML gives it, if there is one (at creation or when it runs:
    either way nothing runs)."""
    if emulation.faults:
        raise EmulatedFailure(min(emulation.faults, key=lambda f: f.failure.at != At.CREATION))


def raise_at_run(emulation: Emulation, values: Mapping[str, np.ndarray]) -> None:
    """The first failure a run's ``values`` meet, if one does."""
    for fault in emulation.pending:
        if fault.flag is not None and fault.flag.measure(values).status == known.Status.MET:
            raise EmulatedFailure(fault)


def values_read(emulation: Emulation) -> list[str]:
    """The values the pending failures read."""
    return list(dict.fromkeys(name for f in emulation.pending if f.flag for name in f.flag.reads if name))


def notes(emulation: Emulation) -> list[str]:
    """What the emulation is, then where DirectML computes otherwise than it, or may: a note a node and rule each."""
    rewritten = counted(len(emulation.emulated), "node")
    said = (
        f"an emulation of DirectML on ONNX Runtime's CPU, not DirectML: its gathers and scatters in DirectML's "
        f"semantics, {rewritten} rewritten as known rules say, the rest as the CPU computes it (docs/dmlsim.md)"
    )
    return [
        said,
        *(
            f"node {u.node!r}: DirectML {'computes' if u.status == known.Status.MET else 'may compute'} otherwise "
            f"(rule {u.rule}), which dmlsim does not emulate: {u.why}"
            for u in emulation.unemulated
        ),
    ]


# The element types ONNX Runtime's Python binding neither takes nor returns, and the wider type each is carried in
# (a Cast at the graph's input and at its output: exact for every value of the type).
_CARRIERS = {
    getattr(TensorProto, name): carrier
    for name, carrier in {
        "BFLOAT16": TensorProto.FLOAT,
        "FLOAT8E4M3FN": TensorProto.FLOAT,
        "FLOAT8E4M3FNUZ": TensorProto.FLOAT,
        "FLOAT8E5M2": TensorProto.FLOAT,
        "FLOAT8E5M2FNUZ": TensorProto.FLOAT,
        "INT4": TensorProto.INT8,
        "UINT4": TensorProto.UINT8,
        "INT2": TensorProto.INT8,
        "UINT2": TensorProto.UINT8,
    }.items()
    if hasattr(TensorProto, name)
}


@dataclass(frozen=True)
class Carried:
    """A model whose main graph's inputs and outputs of ``_CARRIERS``' types go in a wider type: the carried inputs
    and outputs (the model's name -> the carrier's name and the numpy type a value goes in there: the carrier's for an
    input, its own for an output)."""

    model: onnx.ModelProto
    inputs: dict[str, tuple[str, np.dtype]]
    outputs: dict[str, tuple[str, np.dtype]]

    def feeds(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``feeds`` as the carried model takes them."""
        return dict(_carry(name, array, self.inputs) for name, array in feeds.items())

    def returned(self, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The carried model's ``values`` under the model's own names and types."""
        back = {carried: (name, own) for name, (carried, own) in self.outputs.items()}
        return dict(_carry(name, array, back) for name, array in values.items())


def _carry(name: str, array: np.ndarray, by: Mapping[str, tuple[str, np.dtype]]) -> tuple[str, np.ndarray]:
    """``name`` and ``array`` as ``by`` names and types it (as they are where it does not)."""
    if name not in by:
        return name, array
    other, dtype = by[name]
    return other, array.astype(dtype)


def carried(model: onnx.ModelProto) -> Carried:
    """``model`` with each main-graph input and output of a type ONNX Runtime's Python binding cannot take carried in
    a wider one, or ``model`` itself where none is."""
    if not any(v.type.tensor_type.elem_type in _CARRIERS for v in (*model.graph.input, *model.graph.output)):
        return Carried(model, {}, {})
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph, names = copy.graph, Names(copy)
    inputs, outputs, first, last = {}, {}, [], []
    for value in graph.input:
        own = value.type.tensor_type.elem_type
        if own in _CARRIERS:
            inputs[value.name] = (names.fresh(f"{value.name}/carried"), numpy_type(_CARRIERS[own]))
            first.append(onnx.helper.make_node("Cast", [inputs[value.name][0]], [value.name], to=own))
            value.name, value.type.tensor_type.elem_type = inputs[value.name][0], _CARRIERS[own]
    for value in graph.output:
        own = value.type.tensor_type.elem_type
        if own in _CARRIERS:
            outputs[value.name] = (names.fresh(f"{value.name}/carried"), numpy_type(own))
            last.append(onnx.helper.make_node("Cast", [value.name], [outputs[value.name][0]], to=_CARRIERS[own]))
            value.name, value.type.tensor_type.elem_type = outputs[value.name][0], _CARRIERS[own]
    nodes = [*first, *graph.node, *last]
    del graph.node[:]
    graph.node.extend(nodes)
    return Carried(copy, inputs, outputs)
