"""The run that tells the converter the ranks no shape inference can: the values become extra outputs of one run
of the model with ONNX Runtime's CPU provider on the given or generated inputs, and their ranks are read off.
``to_dml(model, observation=Observation(...))`` asks for it; the command line does and says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
from onnx import helper

from onnx_gather.graphs.ranks import Observed
from onnx_gather.graphs.types import ValueType
from onnx_gather.runtime import inputs
from onnx_gather.runtime.sessions import quiet_options


@dataclass(frozen=True)
class Observation:
    """How to run a model to observe ranks: inputs given (``feeds``) and the rest generated as ``run`` does."""

    feeds: Mapping[str, np.ndarray] = field(default_factory=dict)
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    seed: int = 0
    int_range: tuple[int, int] = (0, 4)
    folder: Path | None = None  # where the model's external data lies

    def observe(self, model: onnx.ModelProto, names: Iterable[str]) -> Observed:
        """Run ``model`` once with ONNX Runtime's CPU provider and read the ranks of main-graph values ``names``."""
        names = list(dict.fromkeys(names))
        probe = onnx.ModelProto()
        probe.CopyFrom(model)
        declared = {o.name for o in probe.graph.output}
        probe.graph.output.extend(helper.make_value_info(n, onnx.TypeProto()) for n in names if n not in declared)
        try:
            feeds = inputs.generate(model, self.shapes, self.seed, self.int_range, self.feeds)
        except inputs.InputError as error:
            return Observed(failure=f"no inputs to run it on: {error}")
        described = _describe(feeds, self.feeds)
        warning = inputs.dynamic_hint(model, self.shapes, list(self.feeds))
        described += f" (warning: {warning})" if warning else ""
        try:
            session = onnxruntime.InferenceSession(
                probe.SerializeToString(), quiet_options(self.folder), providers=["CPUExecutionProvider"]
            )
            arrays = session.run(names, feeds)
        except Exception as error:  # ONNX Runtime raises several types; its message says what failed
            message = " ".join(str(error).split())
            failure = f"a run of ONNX Runtime on {described} failed: {message}"
            return Observed(inputs=described, failure=failure)
        types = {
            name: ValueType(helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype), np.shape(a))
            for name, a in zip(names, arrays, strict=True)
        }
        return Observed(types, described)


def _describe(feeds: Mapping[str, np.ndarray], given: Iterable[str]) -> str:
    given = set(given)
    return ", ".join(
        f"{name} {inputs.dims_text(array.shape)} ({'given' if name in given else 'generated'})"
        for name, array in feeds.items()
    )
