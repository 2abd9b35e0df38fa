"""The Python side of ONNX Runtime's DirectML provider on Linux: runner.exe under Wine (``process.WineProgram``)
loads models into DirectML sessions and runs them; ``shared()`` is the process's one runner.
"""

from __future__ import annotations

import atexit
import os
import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from onnx_gather.core.errors import UserError
from onnx_gather.directml import sixteen, tensors
from onnx_gather.directml.layout import D3D12_VARIABLE, NATIVE16, Layout, d3d12_stack
from onnx_gather.directml.process import (
    REQUEST_SECONDS,
    DirectMlError,
    RunnerError,
    SessionCreationError,
    WineProgram,
    windows_path,
)
from onnx_gather.graphs import model_io

DML_PROVIDER = "DmlExecutionProvider"
# Why ONNX Runtime returns no tensor for an output: the DirectML provider fuses a node into the activation that is its
# one consumer (Conv -> Relu, Add -> Relu, MatMul -> Sigmoid, ...), and the fused node makes the activation's value only
# (an output is no consumer), also with its graph fusion off.
ABSENT = (
    "ONNX Runtime returned no tensor for it: the DirectML provider fused the node that makes it into the "
    "activation after it"
)
# And for a constant: ONNX Runtime holds a Constant, and what it folds when it creates the session, as initializers, and
# the DirectML provider takes an initializer that one of its partitions alone uses into that partition, out of the
# session's values (DmlGraphFusionTransformer).
ABSENT_CONSTANT = (
    "ONNX Runtime returned no tensor for it: a constant (an initializer: a Constant's value, or one ONNX Runtime "
    "folds when it creates the session), which the DirectML provider took into its own graph"
)


class FallbackFailure(DirectMlError):
    """A run that failed in a node DirectML did not take, which ONNX Runtime placed on another of its providers
    (``provider``): the failure is that provider's; ONNX Runtime's error is the ``__cause__``."""

    def __init__(self, message: str, provider: str) -> None:
        super().__init__(message)
        self.provider = provider


# ONNX Runtime's error for a node that failed as it ran: "... running GatherElements node. Name:'pick' ..."
_FAILED_NODE = re.compile(r"running (?P<op_type>\S+) node\. Name:'(?P<name>[^']*)'")


@dataclass
class Loaded:
    """A model in the runner: its session id in the runner's start ``start``, input and output names in order, and
    where ONNX Runtime put its nodes."""

    id: int
    start: int
    inputs: list[str]
    outputs: list[str]
    # provider -> the nodes placed on it ("OpType (name)"); only filled when CPU fallback was allowed
    placement: dict[str, list[str]] = field(default_factory=dict)
    # provider -> how many nodes ONNX Runtime placed on it (also when it names none)
    placed: dict[str, int] = field(default_factory=dict)

    def fallback(self, error: DirectMlError) -> FallbackFailure | None:
        """What ``error`` of a run is where the node it names ran on a provider other than DirectML; else None."""
        failed = _FAILED_NODE.search(str(error))
        if failed is None:
            return None
        label = f"({failed['name']})"
        listing = [p for p, names in self.placement.items() if any(n.endswith(label) for n in names)]
        # ONNX Runtime lists the nodes by name only where it placed them on more than one provider
        providers = listing or (list(self.placed) if len(self.placed) == 1 else [])
        if len(providers) != 1 or providers[0] == DML_PROVIDER:
            return None
        return FallbackFailure(
            f"{failed['op_type']} node {failed['name']!r} ran on {providers[0]}, DirectML not "
            f"taking it, and failed there: {error}",
            providers[0],
        )


class Runner(WineProgram):
    """runner.exe (ONNX Runtime with its DirectML provider) under Wine: models loaded into sessions and run."""

    def __init__(self, layout: Layout | None = None, timeout: float = REQUEST_SECONDS) -> None:
        super().__init__("runner", layout, timeout)

    def load(
        self,
        model: str | os.PathLike | onnx.ModelProto,
        fallback: bool = False,
        fuse: bool = True,
        data: str | os.PathLike | None = None,
        optimized: str | os.PathLike | None = None,
    ) -> Loaded:
        """Create a DirectML session of ``model``: a file, whose external data stays beside it, or a ModelProto,
        written into a workspace of the runner's own with the data files it uses linked there from ``data``.

        ``fallback``: let ONNX Runtime put nodes DirectML cannot take on its CPU provider, and report where each
        node went; without it such a model fails to load. ``fuse=False`` (with ``fallback``) turns DirectML's graph
        fusion off: the placement then names every node, where fused ones are listed as one ``DmlFusedNode``.
        ``optimized``: where ONNX Runtime writes the session's graph as it ends up, after its optimizations, the
        placement and the memory copies it inserts (ONNX Runtime then leaves DirectML's graph fusion off itself).
        Where ONNX Runtime refuses to create the session: SessionCreationError (a DirectMlError), its message.
        On the native 16-bit device a model with FLOAT16 arithmetic is refused (``sixteen``): UserError.
        """
        if d3d12_stack() == NATIVE16:
            proto = model if isinstance(model, onnx.ModelProto) else onnx.load(model, load_external_data=False)
            computing = sixteen.float16_arithmetic(proto)
            if computing is not None:
                raise UserError(f"{computing}: {sixteen.REFUSAL}; unset ${D3D12_VARIABLE} to run it")
        mode = 0 if not fallback else 1 if fuse else 2
        with self._model_file(model, data) as path:
            try:
                if optimized is not None:
                    self.request(f"save {windows_path(Path(optimized))}", "save")
                infos, text = self.request(f"load {mode} {windows_path(path)}", f"load of {path.name}")
            except DirectMlError as error:  # the same message, saying where it came
                raise SessionCreationError(*error.args) from None
        loaded = Loaded(int(text), self.starts, [], [])
        provider = ""
        for kind, rest in infos:
            if kind in ("input", "output"):
                getattr(loaded, f"{kind}s").append(rest.partition(" ")[2])
            elif kind == "placement":
                provider = _placement(loaded, rest, provider)
        return loaded

    @contextmanager
    def _model_file(self, model: str | os.PathLike | onnx.ModelProto, data: str | os.PathLike | None) -> Iterator[Path]:
        """The file of ``model``: the one given, or a ModelProto's written into a workspace for its load (ONNX
        Runtime takes its external data from the model's folder alone, refusing symbolic links out of it)."""
        if not isinstance(model, onnx.ModelProto):
            yield Path(model)
            return
        with self.workspace("model") as folder:
            model_io.write_with_data(model, folder / "model.onnx", data)
            yield folder / "model.onnx"

    def run(self, loaded: Loaded, feeds: Mapping[str, np.ndarray], absent: bool = False) -> dict[str, np.ndarray]:
        """Run a loaded model on DirectML; the outputs by name. Every tensor type ONNX Runtime takes travels
        (``tensors``): STRING as str or bytes elements in, an object array of str out. A failure in a node that ran on
        another provider beside DirectML is a FallbackFailure.

        An output ONNX Runtime returns no tensor for (``ABSENT``) fails the run, or with ``absent`` is left out."""
        missing = [name for name in loaded.inputs if name not in feeds]
        if missing:
            raise UserError(f"no value given for the model's inputs {', '.join(missing)}")
        with self._lock:
            if not self.running:
                self.close()  # what is left of it
                raise RunnerError("the runner was ended; load the model again")
            if loaded.start != self.starts:  # its session ended with the runner that loaded it, and the id is reused
                raise RunnerError("the runner that loaded this model has ended since; load the model again")
            with self.workspace("run") as folder:
                for k, name in enumerate(loaded.inputs):
                    tensors.write(folder / f"in{k}.tensor", name, feeds[name])
                try:
                    infos = self.request(f"run {loaded.id} {windows_path(folder)}", "run")[0]
                except DirectMlError as error:
                    fallback = loaded.fallback(error)
                    if fallback is None:
                        raise
                    raise fallback from error
                missing = {loaded.outputs[int(rest)] for kind, rest in infos if kind == "absent"}
                if missing and not absent:
                    raise DirectMlError(f"output {sorted(missing)[0]!r}: {ABSENT}")
                return {
                    name: tensors.read(folder / f"out{k}.tensor", name)
                    for k, name in enumerate(loaded.outputs)
                    if name not in missing
                }

    def capabilities(self) -> dict[str, str]:
        """What the Direct3D 12 device under DirectML offers: shader_model, wave_ops, int64_ops, native16."""
        text = self.request("caps", "capabilities")[1]
        words = text.split()
        return dict(zip(words[::2], words[1::2], strict=True))

    def free(self, loaded: Loaded) -> None:
        """Release a loaded model's session (nothing to do if the runner has ended since)."""
        with self._lock:
            if self.running and loaded.start == self.starts:
                self.request(f"free {loaded.id}", "free")


def _placement(loaded: Loaded, line: str, provider: str) -> str:
    """Fold one line of ONNX Runtime's placement log into ``loaded``; returns the provider now being listed."""
    text = line.strip()
    if "placed on [" in text:
        provider = text.split("placed on [", 1)[1].split("]", 1)[0]
        count = text.rsplit(":", 1)[1].strip()
        loaded.placed[provider] = int(count) if count.isdigit() else 0
        loaded.placement.setdefault(provider, [])
    elif text.startswith("Some nodes were not assigned"):  # ONNX Runtime's remark on shape ops, not a node
        pass
    elif provider and text and text != "Node placements":
        loaded.placement[provider].append(text)
    return provider


_shared: Runner | None = None
_shared_lock = threading.Lock()


def shared() -> Runner:
    """The process's runner, started on first use and ended when the process exits."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Runner()
            atexit.register(_shared.close)
        _shared.start()
        return _shared
