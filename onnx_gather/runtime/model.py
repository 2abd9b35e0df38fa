"""A model file as the backends get it, and the models derived from it (other outputs, inputs with a default fed),
which share its external data and are never written beside it."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from onnx_gather.graphs import model_io
from onnx_gather.runtime import inputs


@dataclass
class Model:
    """A model of the file ``path``, read without its external data, which stays in that file's folder.

    ``proto`` is the file's model itself (``as_read``, as ``Model.read`` gives it), which backends load from the
    file, or one derived from it (other outputs, a window of it) sharing its external data, which they get as bytes
    (ONNX Runtime told the data's folder) or written into a temporary folder of their own with the data files linked
    there. Nothing is ever written beside the file.
    """

    path: Path
    proto: onnx.ModelProto
    # Values made outputs only to be compared (``parity --all-tensors``): a backend that cannot return one says so
    # (``Outcome.absent``) instead of failing the run.
    marked: frozenset[str] = frozenset()
    as_read: bool = False

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
