"""``onnx-gather reduce``: from a model whose outputs differ (or that fails) on one backend against a reference, a
small window of its main graph that still differs, or fails, the same way (in the spirit of Polygraphy's
``debug reduce``).

The reference runs once, on the whole model with every value marked as an output; every window is then fed what
the reference computed and run on the backend alone, its outputs held against the reference's values. The search:

1. the shortest prefix of the graph's topological order that still shows the symptom (bisection);
2. the latest start that keeps it (bisection);
3. each node but the last removed in turn, kept out where the symptom stays (its outputs then come from the
   reference).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from onnx_gather.graphs import model_io
from onnx_gather.graphs.extract import window
from onnx_gather.graphs.plumbing import sort_topologically, unnamed
from onnx_gather.runtime import divergence
from onnx_gather.runtime.backends import Backend, Model
from onnx_gather.runtime.comparison import Tolerance, compare
from onnx_gather.runtime.parity import one_line


@dataclass(frozen=True)
class Symptom:
    """How a backend parts from the reference on a model: the type of the error it fails with, or the outputs it
    computes outside tolerance."""

    error: str | None  # the error's type name, where the backend fails
    detail: str  # the error's line, or the outputs outside tolerance

    def same_kind(self, other: Symptom) -> bool:
        return self.error == other.error


@dataclass
class Reduction:
    """The window found: the model, its inputs (the reference's values), the symptom it shows, and the runs made."""

    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    symptom: Symptom
    nodes: list[str]  # the kept nodes, as "Op 'name'"
    runs: int


class NoDifference(Exception):
    """The backend agrees with the reference on the whole model."""


class ReductionError(RuntimeError):
    """The search could not end on a window that shows the symptom."""


class ReferenceFailure(Exception):
    """The reference failed its run of the whole model with every value marked as an output (its message, one line):
    without its values no window can be fed."""


def shrink(count: int, shows: Callable[[Sequence[int]], bool]) -> list[int]:
    """The positions of a small window of ``count`` nodes that ``shows`` the symptom, which the whole does."""
    low, high = 1, count  # the shortest prefix: shows(range(high)) holds throughout
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if shows(range(middle)) else (middle + 1, high)
    end = high
    low, high = 0, end - 1  # the latest start: shows(range(low, end)) holds throughout
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if shows(range(middle, end)) else (low, middle - 1)
    kept = list(range(low, end))
    for position in kept[:-1]:
        trial = [p for p in kept if p != position]
        if shows(trial):
            kept = trial
    return kept


class Reducer:
    """Runs windows of ``model`` on ``backend`` and tells whether each shows the whole model's symptom."""

    def __init__(
        self, model: Model, feeds: Mapping[str, np.ndarray], backend: Backend, reference: Backend,
        tolerance: Tolerance, progress: Callable[[str], object],
    ) -> None:  # fmt: skip
        proto = onnx.ModelProto()
        proto.CopyFrom(model.proto)
        sort_topologically(proto)
        self.model = Model(model.path, proto)
        self.backend, self.tolerance, self.progress = backend, tolerance, progress
        with divergence.marked(self.model) as marked:
            try:
                computed = reference.run(marked, feeds).outputs
            except Exception as error:  # what the reference fails with, as parity reports a backend's failure
                raise ReferenceFailure(one_line(error)) from error
        self.values = {**feeds, **computed}
        self.runs = 0

    def symptom(self, proto: onnx.ModelProto) -> Symptom | None:
        """What the backend does on ``proto`` (fed from the reference's values) where it parts from the reference."""
        feeds = {value.name: self.values[value.name] for value in proto.graph.input}
        self.runs += 1
        try:
            with model_io.temporary_copy(proto, self.model.path) as path:
                outputs = self.backend.run(Model(path, proto), feeds).outputs
        except Exception as error:  # what the backend fails with is the symptom looked for
            return Symptom(type(error).__name__, one_line(error))
        bad = [
            name
            for name, value in outputs.items()
            if not compare(np.asarray(self.values[name]), np.asarray(value), self.tolerance).within_tolerance
        ]
        return Symptom(None, "outputs outside tolerance: " + ", ".join(bad)) if bad else None

    def reduce(self) -> Reduction:
        nodes = self.model.proto.graph.node
        whole = self.symptom(self.model.proto)
        if whole is None:
            raise NoDifference(f"{self.backend.name} agrees with the reference on every output")
        self.progress(f"the whole model ({len(nodes)} nodes): {whole.detail}")

        def shows(keep: Sequence[int]) -> bool:
            start = time.perf_counter()
            try:
                found = self.symptom(window(self.model.proto, set(keep), self.values))
            except KeyError as missing:  # a value the reference did not give (no type known for it)
                self.progress(f"  {len(keep)} nodes: not cut there, no reference value for {missing}")
                return False
            result = found is not None and found.same_kind(whole)
            verdict = "shows it" if result else "does not"
            nodes = f"{len(keep)} node{'s' if len(keep) > 1 else ''}"
            self.progress(f"  {nodes} from #{min(keep)}: {verdict} ({time.perf_counter() - start:.1f} s)")
            return result

        kept = shrink(len(nodes), shows)
        reduced = window(self.model.proto, set(kept), self.values)
        symptom = self.symptom(reduced)
        if symptom is None or not symptom.same_kind(whole):
            raise ReductionError(f"the {len(kept)} nodes found showed it once and not again: is {self.backend.name} "
                                 "deterministic on this model?")  # fmt: skip
        return Reduction(
            reduced, {v.name: np.asarray(self.values[v.name]) for v in reduced.graph.input}, symptom,
            [f"{nodes[p].op_type} {nodes[p].name or unnamed(nodes[p], p)!r}" for p in kept], self.runs,
        )  # fmt: skip
