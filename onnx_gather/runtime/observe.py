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
from onnx import helper, numpy_helper

from onnx_gather.graphs.plumbing import needed_nodes
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
        run = self.values(model, names)
        if run.failure:
            return Observed(inputs=run.inputs, failure=run.failure)
        types = {
            name: ValueType(helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype), np.shape(a))
            for name, a in run.arrays.items()
        }
        return Observed(types, run.inputs)

    def values(self, model: onnx.ModelProto, names: Iterable[str]) -> Values:
        """Run ``model`` once with ONNX Runtime's CPU provider and take the values of main-graph values ``names``:
        only the nodes they need run; a name the main graph does not hold (a subgraph's) is left out, and where the
        run fails, the inputs' and initializers' values asked for come with the failure."""
        try:
            feeds = inputs.generate(model, self.shapes, self.seed, self.int_range, self.feeds)
        except inputs.InputError as error:
            return Values(failure=f"no inputs to run it on: {error}")
        described = _describe(feeds, self.feeds)
        warning = inputs.dynamic_hint(model, self.shapes, list(self.feeds))
        described += f" (warning: {warning})" if warning else ""
        names = list(dict.fromkeys(names))
        initializers = {t.name: t for t in model.graph.initializer}
        known = {name: feeds[name] for name in names if name in feeds}
        known.update(
            (name, numpy_helper.to_array(initializers[name]))
            for name in names
            if name in initializers
            and name not in known
            and initializers[name].data_location != onnx.TensorProto.EXTERNAL
        )
        nodes = needed_nodes(model.graph, [name for name in names if name not in known])
        made = [name for name in names if name not in known and any(name in node.output for node in nodes)]
        if not made:
            return Values(known, described)
        probe = onnx.ModelProto()
        probe.CopyFrom(model)  # only the nodes the values need run: a later one may fail where DirectML does not
        del probe.graph.node[:], probe.graph.output[:]
        probe.graph.node.extend(nodes)
        probe.graph.output.extend(helper.make_value_info(name, onnx.TypeProto()) for name in made)
        try:
            session = onnxruntime.InferenceSession(
                probe.SerializeToString(), quiet_options(self.folder), providers=["CPUExecutionProvider"]
            )
            arrays = session.run(made, {name: array for name, array in feeds.items() if name in _inputs(session)})
        except Exception as error:  # ONNX Runtime raises several types; its message says what failed
            message = " ".join(str(error).split())
            return Values(known, described, f"a run of ONNX Runtime on {described} failed: {message}")
        return Values({**known, **dict(zip(made, arrays, strict=True))}, described)


@dataclass(frozen=True)
class Values:
    """What one run of a model gave: the values asked for by name, the inputs it ran on, or why it failed."""

    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    inputs: str = ""  # e.g. "images 1x3x1x1 (generated)"
    failure: str = ""


def _inputs(session: onnxruntime.InferenceSession) -> set[str]:
    return {value.name for value in session.get_inputs()}


def _describe(feeds: Mapping[str, np.ndarray], given: Iterable[str]) -> str:
    given = set(given)
    return ", ".join(
        f"{name} {inputs.dims_text(array.shape)} ({'given' if name in given else 'generated'})"
        for name, array in feeds.items()
    )
