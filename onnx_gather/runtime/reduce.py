"""``onnx-gather reduce``: from a model whose outputs differ (or that fails) on one backend against a reference, a
1-minimal window of its main graph that still differs, or fails, the same way (in the spirit of Polygraphy's
``debug reduce``).

1. The backend runs the model itself, unchanged: what it shows there is the symptom looked for.
2. The reference runs once, on the whole model with every value marked as an output; every window
   (``graphs.extract.window``: the model's own declarations, symbolic dims and all) is fed what it computed.
3. Delta debugging (``runtime.minimize``) over the nodes' positions: chunks, then single nodes, until leaving out
   any one node of the window loses the symptom, or the budget (runs, time) is spent.
4. The same symptom: a failure of the same type at a node of the same op type, with the same HRESULT or ONNX
   Runtime status; a difference of the size first seen (within a factor ``SIZE_FACTOR`` of how many times its
   tolerance the whole model's worst output is off), not a smaller drift that happens to pass the tolerance.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import onnx

from onnx_gather.core.words import counted, listed, one_line
from onnx_gather.graphs.extract import main_graph_types, window
from onnx_gather.graphs.plumbing import node_label, sort_topologically
from onnx_gather.runtime import divergence
from onnx_gather.runtime.backends import Backend
from onnx_gather.runtime.comparison import Tolerance, compare, excess
from onnx_gather.runtime.minimize import Step, ddmin
from onnx_gather.runtime.model import Model

SIZE_FACTOR = 10  # a window's difference is the model's when at least a tenth of its size (in tolerances)
_HRESULT = re.compile(r"\b(8[0-9A-F]{7})\b")  # DirectML's and Direct3D's failure codes: 80070057, 8007000E, ...
_STATUS = re.compile(r"\[ONNXRuntimeError\] : \d+ : (\w+)")
_NODE = re.compile(r"running (\w+) node\. Name:'")  # ONNX Runtime names the node a run failed at


@dataclass(frozen=True)
class Symptom:
    """How a backend parts from the reference on a model: it fails (the error's type, the op type of the node ONNX
    Runtime names, the HRESULT or status), or computes outputs outside tolerance (the worst one's size, in
    tolerances, and the figures)."""

    error: str | None  # the error's type name, where the backend fails
    detail: str  # the error's line, or the outputs outside tolerance with their figures
    op_type: str | None = None  # the node's, where the failure names one
    code: str | None = None  # the HRESULT, else ONNX Runtime's status, where the failure says one
    size: float = 0.0  # a difference: how many times its tolerance the worst position is off

    @staticmethod
    def failure(error: BaseException) -> Symptom:
        text = one_line(error)
        node, hresult, status = _NODE.search(text), _HRESULT.search(text), _STATUS.search(text)
        code = hresult[1] if hresult else status[1] if status else None
        return Symptom(type(error).__name__, text, node[1] if node else None, code)

    def same_as(self, first: Symptom) -> bool:
        """Whether this is ``first`` (the whole model's symptom) again (the module's rule 4)."""
        if self.error != first.error:
            return False
        if self.error is None:
            return self.size * SIZE_FACTOR >= first.size
        return (self.op_type, self.code) == (first.op_type, first.code)


@dataclass
class Reduction:
    """The window found: the model, its inputs (the reference's values), the symptom it shows and the whole
    model's, the kept nodes, the runs made, whether it is 1-minimal, and what to know of it ("" for nothing)."""

    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    symptom: Symptom
    whole: Symptom
    nodes: list[str]  # the kept nodes, as "Op 'name'"
    runs: int
    minimal: bool
    note: str = ""


class NoDifference(Exception):
    """The backend agrees with the reference on the whole model."""


class ReferenceFailure(Exception):
    """The reference failed its run of the whole model with every value marked as an output (its message, one line):
    without its values no window can be fed."""


@dataclass(frozen=True)
class Budget:
    """When the search stops early with the smallest window so far (not minimal): after ``runs`` runs of the
    backend, or ``seconds``."""

    runs: int = 400
    seconds: float = 1800.0


class Reducer:
    """Runs windows of ``model`` on ``backend`` and tells whether each shows the whole model's symptom."""

    def __init__(
        self,
        model: Model,
        feeds: Mapping[str, np.ndarray],
        backend: Backend,
        reference: Backend,
        tolerance: Tolerance,
        progress: Callable[[str], object],
    ) -> None:
        self.original = model
        proto = onnx.ModelProto()
        proto.CopyFrom(model.proto)
        sort_topologically(proto)
        self.model = Model(model.path, proto)
        self.types = main_graph_types(proto)
        self.backend, self.tolerance, self.progress = backend, tolerance, progress
        marked = divergence.marked(self.model)  # onnx-gather's own work: its failure is not the reference's
        try:
            computed = reference.run(marked, feeds).outputs
            # The whole model is held to the reference's outputs unmarked, as parity holds it: marking every value
            # can change what the reference fuses too.
            self.plain = {**feeds, **reference.run(model, feeds).outputs}
        except Exception as error:  # what the reference fails with, as parity reports a backend's failure
            raise ReferenceFailure(one_line(error)) from error
        self.values = {**feeds, **computed}
        self.runs = 0

    def symptom(self, model: Model, reference: Mapping[str, np.ndarray] | None = None) -> Symptom | None:
        """What the backend does on ``model`` (fed from the reference's values) where it parts from the reference's
        values (``reference``: others than the marked run's)."""
        expected_values = self.values if reference is None else reference
        feeds = {value.name: self.values[value.name] for value in model.proto.graph.input}
        self.runs += 1
        try:
            outputs = self.backend.run(model, feeds).outputs
        except Exception as error:  # what the backend fails with is the symptom looked for
            return Symptom.failure(error)
        sizes, figures = {}, []
        for name, value in outputs.items():
            expected, actual = np.asarray(expected_values[name]), np.asarray(value)
            comparison = compare(expected, actual, self.tolerance)
            if not comparison.within_tolerance:
                sizes[name] = excess(expected, actual, comparison)
                said = f"max abs {comparison.max_abs:.3g}, " if comparison.max_abs is not None else ""
                figures.append(f"{name} ({said}{comparison.mismatches} mismatches{_note(comparison.note)})")
        if not sizes:
            return None
        return Symptom(None, "outputs outside tolerance: " + ", ".join(figures), size=max(sizes.values()))

    def _window(self, kept: tuple[int, ...]) -> Model:
        return Model(self.model.path, window(self.model.proto, set(kept), self.values, self.types))

    def _named(self, positions: tuple[int, ...] | list[int]) -> list[str]:
        nodes = self.model.proto.graph.node
        return [f"{nodes[p].op_type} {node_label(nodes[p], p)!r}" for p in positions]

    def reduce(self, budget: Budget = Budget()) -> Reduction:
        count = len(self.model.proto.graph.node)
        whole = self.symptom(self.original, self.plain)  # the model itself, as the user has it
        if whole is None:
            raise NoDifference(f"{self.backend.name} agrees with the reference on every output")
        self.progress(f"the whole model ({count} nodes): {whole.detail}")
        seen: dict[tuple[int, ...], Symptom] = {tuple(range(count)): whole}
        start = time.monotonic()

        def shows(kept: tuple[int, ...]) -> bool:
            try:
                found = self.symptom(self._window(kept))
            except KeyError as missing:  # a value the reference did not give (no type known for it)
                self.progress(f"  not cut there: no reference value for {missing}")
                return False
            if found is not None and found.same_as(whole):
                seen[kept] = found
                return True
            return False

        smallest = [tuple(range(count))]  # the smallest window that showed it before the step told

        def told(step: Step) -> None:
            removed = self._named(sorted(set(smallest[0]) - set(step.kept))) if step.shows else []
            if step.shows and len(step.kept) < len(smallest[0]):
                smallest[0] = step.kept
            what = f"{counted(len(step.kept), 'node')}: {'shows it' if step.shows else 'does not'}"
            gone = f", left out {listed(removed, 3, quoted=False)}" if removed else ""
            # the runs to come: the search's, and one of the window found; no bound of the search's is of use
            allowed = budget.runs - self.runs
            self.progress(
                f"  run {step.tests}: {what}{gone}; smallest so far {step.smallest} "
                f"(about {counted(step.estimate + 1, 'run')} more by an estimate, at most {allowed} within "
                f"--max-runs; {time.monotonic() - start:.0f} s so far)"
            )

        def more() -> bool:  # one run kept for the window found
            return self.runs < budget.runs - 1 and time.monotonic() - start < budget.seconds

        found = ddmin(range(count), shows, more, told)
        reduced = self._window(found.kept)
        again = self.symptom(reduced)
        note = ""
        if again is None or not again.same_as(whole):
            note = (
                f"it showed the symptom once and not on a second run ({again.detail if again else 'no difference'}"
                f"): {self.backend.name} may not be deterministic on it"
            )
            again = seen[found.kept]
        feeds = {value.name: np.asarray(self.values[value.name]) for value in reduced.proto.graph.input}
        nodes = self._named(found.kept)
        return Reduction(reduced.proto, feeds, again, whole, nodes, self.runs, found.minimal, note)


def _note(note: str) -> str:
    return f", {note}" if note else ""
