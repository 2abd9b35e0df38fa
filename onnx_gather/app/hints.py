"""What the user can do about a backend's failure, worded after the run from the failure itself."""

from __future__ import annotations

import re

import onnx

from onnx_gather.app.options import InputChoice
from onnx_gather.core.words import counted, listed
from onnx_gather.directml.process import DirectMlError, RunnerError
from onnx_gather.directml.worker import FallbackFailure
from onnx_gather.graphs.allowzero import allowzero_reshapes
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


# ONNX Runtime's refusal of a model newer than it reads (1.24.4, the last with DirectML, reads IR version 13 at most)
_IR_VERSION = re.compile(r"Unsupported model IR version: \d+, max supported IR version: (?P<most>\d+)")


# ONNX Runtime's words for a node that failed when it ran (the dml backend names every node of the main graph)
_FAILED_RESHAPE = re.compile(r"running Reshape node\. Name:'(?P<name>[^']*)'")
_ALLOWZERO_0 = (
    "`onnx-gather convert --reshape-allowzero-0` sets allowzero to 0 where no 0 can reach the shape (add "
    "--assume-nonempty-inputs where the shape is made of the inputs' dims, as PyTorch's view writes it; "
    "`onnx-gather lower` its output to run it on DirectML)"
)


def _allowzero_hint(error: DirectMlError, model: onnx.ModelProto) -> str:
    """Where DirectML failed on a Reshape with allowzero=1 (it fails on those with a -1 in the shape: at run time,
    naming the node, where the input dims are symbolic; at session creation, naming none, where they are fixed),
    the option of ``convert`` that rewrites them; else ""."""
    flagged = allowzero_reshapes(model)
    if not flagged:
        return ""
    named = _FAILED_RESHAPE.search(str(error))
    if named is not None and named["name"] in flagged:
        return (
            f"Reshape {named['name']!r} has allowzero=1, which DirectML fails on with a -1 in the shape: {_ALLOWZERO_0}"
        )
    if named is None and "Exception during initialization" in str(error):
        return (
            f"the model has {counted(len(flagged), 'Reshape')} with allowzero=1, which DirectML fails on at "
            f"session creation with a -1 in the shape: {_ALLOWZERO_0}"
        )
    return ""


def failure_hint(error: BaseException, backend: str, model: onnx.ModelProto, feeds: Feeds, choice: InputChoice) -> str:
    """What the user can do about the failure ``error`` of ``backend`` on ``model`` run on ``feeds``: give other
    inputs where they can explain it; nothing where the device is the problem, or the lowering (its error names the
    node and why). A backend that cannot take the model at all (DML ops where it has none) was skipped before it ran:
    ``Backend.refusal`` says why."""
    if isinstance(error, DeviceError | RunnerError | LoweringError):
        return ""  # the device, the DirectML runner's end (out of memory, time limit), the lowering: not the inputs
    newer = _IR_VERSION.search(str(error))
    if newer:
        return (
            f"this ONNX Runtime reads models of IR version {newer['most']} at most: save the model with "
            f"ir_version = {newer['most']} (onnx's helper.make_model writes the newest by default)"
        )
    hint = _inputs_hint(error, model, feeds, choice)
    if isinstance(error, DirectMlError) and not isinstance(error, FallbackFailure):  # DirectML's own
        known = (
            "DirectML failures known on Windows too are listed in `onnx-gather docs directml-on-linux`, 'Known "
            "DirectML failures'"
        )
        return "; ".join(part for part in (hint, _allowzero_hint(error, model), known) if part)
    return hint


def parity_hint(parity: Parity, model: onnx.ModelProto, choice: InputChoice) -> str:
    """The hints for every backend that failed in ``parity``, each once; and where one failed while an output has
    another shape than the model declares, that declaration."""
    hints = [
        failure_hint(run.error, name, model, parity.feeds, choice)
        for name, run in parity.backends.items()
        if run.error is not None
    ]
    if parity.declared and any(run.error is not None for run in parity.backends.values()):
        outputs = listed(entry.output for entry in parity.declared)
        hints.append(
            f"the model declares another shape for {outputs} than computed (see above), which ONNX "
            "Runtime's DirectML provider fails on where a fixed dim differs: correct or clear it"
        )
    return "; ".join(dict.fromkeys(hint for hint in hints if hint))
