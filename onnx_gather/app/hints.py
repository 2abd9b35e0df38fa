"""What the user can do about a backend's failure, worded after the run from the failure itself."""

from __future__ import annotations

import onnx

from onnx_gather.app.options import InputChoice
from onnx_gather.core.contract import DML_OP_TYPES
from onnx_gather.directml.process import DirectMlError, RunnerError
from onnx_gather.graphs.lowering.lower import LoweringError
from onnx_gather.runtime import inputs
from onnx_gather.runtime.backends import DeviceError
from onnx_gather.runtime.inputs import Feeds
from onnx_gather.runtime.parity import Parity


def _inputs_hint(error: BaseException, model: onnx.ModelProto, feeds: Feeds, choice: InputChoice) -> str:
    """What other inputs could do: a generated integer input that reached an index out of range, else ""
    (dynamic dims generated as 1 are warned of before the run: ``Feeds.warning``)."""
    generated = [value.name for value in inputs.model_inputs(model) if value.name in feeds.generated]
    return inputs.index_hint(model, str(error), generated, choice.int_range)


def failure_hint(error: BaseException, model: onnx.ModelProto, feeds: Feeds, choice: InputChoice) -> str:
    """What the user can do about a backend's ``error`` on ``model`` run on ``feeds``: run DML ops with the pyop
    backend; give other inputs where they can explain it; nothing where the device is the problem, or the lowering
    (its error names the node and why)."""
    if isinstance(error, DeviceError | RunnerError | LoweringError):
        return ""  # the device, the DirectML runner's end (out of memory, time limit), the lowering: not the inputs
    if any(op_type in str(error) for op_type in DML_OP_TYPES):
        return ("the model holds onnx-gather's DML ops, which only the pyop backend runs: use --backend pyop, or "
                "`onnx-gather lower` it into standard ONNX first")  # fmt: skip
    hint = _inputs_hint(error, model, feeds, choice)
    if isinstance(error, DirectMlError):
        known = "DirectML failures known on Windows too are listed in onnx-gather's README, 'Known DirectML failures'"
        return f"{hint}; {known}" if hint else known
    return hint


def parity_hint(parity: Parity, model: onnx.ModelProto, choice: InputChoice) -> str:
    """The hints for every backend that failed in ``parity``, each once."""
    hints = (failure_hint(error, model, parity.feeds, choice) for error in parity.failures)
    return "; ".join(dict.fromkeys(hint for hint in hints if hint))
