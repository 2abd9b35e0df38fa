"""The ``dmlsim`` backend's failures and notes: what DirectML would raise where a rule says it fails, and what of
its outputs the emulation cannot vouch for (``graphs.emulate``)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from onnx_gather.core.words import counted
from onnx_gather.graphs.emulate import Emulation, Fault
from onnx_gather.graphs.placement import known
from onnx_gather.graphs.placement.nodes import At


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
