"""The model a command runs, as the backends take it, with the DML form those that run it through ``to_dml`` share,
and the models derived from it (other outputs, inputs with a default fed), which share its external data and are never
written beside it."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from onnx_gather.graphs import model_io
from onnx_gather.graphs.convert import to_dml
from onnx_gather.graphs.emulate import Emulation, emulated
from onnx_gather.runtime import inputs
from onnx_gather.runtime.observe import Observation


@dataclass
class Model:
    """A model of the file ``path``, read without its external data, which stays in that file's folder.

    ``proto`` is the file's model itself (``as_read``, as ``Model.read`` gives it), which backends load from the
    file, or one derived from it (other outputs, a window of it) sharing its external data, which they get as bytes
    (ONNX Runtime told the data's folder) or written into a temporary folder of their own with the data files linked
    there. Nothing is ever written beside the file. ``proto`` is not changed once a backend has run it (``converted``
    keeps what it made of it).
    """

    path: Path
    proto: onnx.ModelProto
    # Values made outputs only to be compared (``parity --all-tensors``): a backend that cannot return one says so
    # (``Outcome.absent``) instead of failing the run.
    marked: frozenset[str] = frozenset()
    as_read: bool = False
    # ``converted``'s DML forms, by the conversion's parameters: made once for all the backends of a run.
    conversions: dict[tuple, onnx.ModelProto] = field(default_factory=dict, repr=False, compare=False)
    emulations: dict[str, Emulation] = field(default_factory=dict, repr=False, compare=False)  # by the feeds

    @classmethod
    def read(cls, path: str | os.PathLike) -> Model:
        """The model of the file at ``path`` (``model_io.load``: checked, its nodes sorted)."""
        return cls(Path(path), model_io.load(path), as_read=True)

    @property
    def folder(self) -> Path:
        """Where its external data lies."""
        return self.path.parent

    @property
    def output_names(self) -> list[str]:
        return [value.name for value in self.proto.graph.output]

    def for_onnxruntime(self) -> str | bytes:
        """What an ONNX Runtime session of it loads, with ``quiet_options(model.folder)``: the file, or the bytes of
        a derived model, whose external data the session finds through that folder."""
        return str(self.path) if self.as_read else self.proto.SerializeToString()

    def converted(
        self, feeds: Mapping[str, np.ndarray], out_of_bounds: str, native_float16: bool = False
    ) -> onnx.ModelProto:
        """``to_dml`` of it, the ranks shape inference cannot tell observed in a run on ``feeds`` (the very inputs
        the backend runs): made once for each set of parameters and shared by every backend that asks for it
        (parity's ``pyop``, ``lowered`` and ``evaluator``), which must not change it."""
        key = (out_of_bounds, native_float16, _digest(feeds))
        if key not in self.conversions:
            observation = Observation(feeds=dict(feeds), folder=self.folder)
            self.conversions[key] = to_dml(
                self.proto, out_of_bounds=out_of_bounds, observation=observation, native_float16=native_float16
            )
        return self.conversions[key]

    def emulated(self, feeds: Mapping[str, np.ndarray]) -> Emulation:
        """The model as DirectML computes it (``graphs.emulate.emulated``), the ranks inference cannot tell observed
        in a run on ``feeds``: made once for each set of feeds."""
        key = _digest(feeds)
        if key not in self.emulations:
            self.emulations[key] = emulated(self.proto, Observation(feeds=dict(feeds), folder=self.folder))
        return self.emulations[key]


def _digest(feeds: Mapping[str, np.ndarray]) -> str:
    """The feeds' names, types, shapes and values, as one digest (strings by their text)."""
    digest = hashlib.sha256()
    for name in sorted(feeds):
        array = np.asarray(feeds[name])
        values = repr(array.tolist()).encode() if array.dtype.hasobject else array.tobytes()
        digest.update(repr((name, array.dtype.str, array.shape, len(values))).encode())
        digest.update(values)
    return digest.hexdigest()


def with_outputs(model: Model, outputs: Sequence[onnx.ValueInfoProto], marked: frozenset[str]) -> Model:
    """``model`` with ``outputs`` as its graph's outputs (``marked``: those made outputs only to be compared)."""
    proto = onnx.ModelProto()
    proto.CopyFrom(model.proto)
    del proto.graph.output[:]
    proto.graph.output.extend(outputs)
    return Model(model.path, proto, marked)


def with_defaults_fed(model: Model, feeds: Mapping[str, np.ndarray]) -> Model:
    """``model``, or where ``feeds`` override initializers (inputs with a default, ``inputs.with_defaults``), one
    derived from it without those: for runtimes that take only a model's plain inputs as feeds."""
    fed = {value.name for value in inputs.with_defaults(model.proto)} & set(feeds)
    if not fed:
        return model
    proto = onnx.ModelProto()
    proto.CopyFrom(model.proto)
    kept = [tensor for tensor in proto.graph.initializer if tensor.name not in fed]
    del proto.graph.initializer[:]
    proto.graph.initializer.extend(kept)
    return Model(model.path, proto, model.marked)
