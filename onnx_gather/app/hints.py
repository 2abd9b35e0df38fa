"""What the user can do about a backend's failure, worded after the run from the failure itself."""

from __future__ import annotations

import re

import onnx

from onnx_gather.app.options import InputChoice
from onnx_gather.core import contract
from onnx_gather.directml.process import DirectMlError, RunnerError
from onnx_gather.directml.worker import FallbackFailure
from onnx_gather.graphs.lowering.lower import LoweringError
from onnx_gather.graphs.plumbing import bodies
from onnx_gather.runtime import backends, inputs
from onnx_gather.runtime.backends import DeviceError
from onnx_gather.runtime.inputs import Feeds
from onnx_gather.runtime.parity import Parity


def _inputs_hint(error: BaseException, model: onnx.ModelProto, feeds: Feeds, choice: InputChoice) -> str:
    """What other inputs could do: a generated integer input that reached an index out of range, else ""
    (dynamic dims generated as 1 are warned of before the run: ``Feeds.warning``)."""
    generated = [value.name for value in inputs.model_inputs(model) if value.name in feeds.generated]
    return inputs.index_hint(model, str(error), generated, choice.int_range)


# ONNX Runtime's refusal of a model newer than it reads (1.24.4, the last with DirectML, reads IR version 13 at most)
_IR_VERSION = re.compile(r"Unsupported model IR version: \d+, max supported IR version: (?P<most>\d+)")


def _holds_dml_ops(model: onnx.ModelProto) -> bool:
    return any(contract.is_dml(node) for body in bodies(model) for node in body.nodes)


def failure_hint(error: BaseException, backend: str, model: onnx.ModelProto, feeds: Feeds, choice: InputChoice) -> str:
    """What the user can do about the failure ``error`` of ``backend`` on ``model`` run on ``feeds``: run a model
    that holds DML ops on a backend that runs them; give other inputs where they can explain it; nothing where the
    device is the problem, or the lowering (its error names the node and why)."""
    if isinstance(error, DeviceError | RunnerError | LoweringError):
        return ""  # the device, the DirectML runner's end (out of memory, time limit), the lowering: not the inputs
    names_a_dml_op = any(op_type in str(error) for op_type in contract.DML_OP_TYPES)
    if names_a_dml_op and not backends.create(backend).runs_dml_ops and _holds_dml_ops(model):
        return (f"the model holds onnx-gather's DML ops, which the {backend} backend cannot run: use --backend "
                "pyop, or `onnx-gather lower` it into standard ONNX first")  # fmt: skip
    newer = _IR_VERSION.search(str(error))
    if newer:
        return (f"this ONNX Runtime reads models of IR version {newer['most']} at most: save the model with "
                f"ir_version = {newer['most']} (onnx's helper.make_model writes the newest by default)")  # fmt: skip
    hint = _inputs_hint(error, model, feeds, choice)
    if isinstance(error, DirectMlError) and not isinstance(error, FallbackFailure):  # DirectML's own
        known = ("DirectML failures known on Windows too are listed in `onnx-gather docs directml-on-linux`, 'Known "
                 "DirectML failures'")  # fmt: skip
        return f"{hint}; {known}" if hint else known
    return hint


def parity_hint(parity: Parity, model: onnx.ModelProto, choice: InputChoice) -> str:
    """The hints for every backend that failed in ``parity``, each once."""
    hints = (failure_hint(run.error, name, model, parity.feeds, choice)
             for name, run in parity.backends.items() if run.error is not None)  # fmt: skip
    return "; ".join(dict.fromkeys(hint for hint in hints if hint))
