"""``onnx-gather reduce``: from a model whose outputs differ (or that fails) on one backend against a reference, a
1-minimal window of its main graph that still differs, or fails, the same way (in the spirit of Polygraphy's
``debug reduce``).

1. Every model is judged as ``onnx-gather parity MODEL --inputs IN --backends B --reference R`` judges it
   (``Reducer.judge``: ``run_parity``, the same fusions, tolerances, exact yardstick and ties): B shows the symptom
   where that run fails on B's account, an error of B's or an output outside tolerance and beyond float error.
2. The whole model first, unchanged: what B shows there is the symptom looked for; a model whose outputs differ by
   float error alone has none.
3. The reference runs once more, on the whole model with every value marked as an output; every window
   (``graphs.extract.window``: the model's own declarations, symbolic dims and all) is fed what it computed.
4. Delta debugging (``runtime.minimize``) over the nodes' positions: chunks, then single nodes, until leaving out
   any one node of the window loses the symptom, or the budget (runs, time) is spent.
5. The same symptom: a failure of the same type at a node of the same op type, with the same HRESULT or ONNX
   Runtime status; a difference of the size first seen (within a factor ``SIZE_FACTOR`` of how far the whole
   model's worst output is off: in allowances of float error where the yardstick judges it, else in tolerances),
   not a smaller drift.
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
from onnx_gather.runtime.backends import Backend, CannotRun
from onnx_gather.runtime.comparison import Comparison, Tolerance
from onnx_gather.runtime.inputs import Feeds
from onnx_gather.runtime.minimize import Step, ddmin
from onnx_gather.runtime.model import Model
from onnx_gather.runtime.parity import Parity, run_parity

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
    """The backend agrees with the reference on the whole model: within tolerance, or within float error (the
    message says which outputs are apart by float error alone, with their figures)."""


class ReferenceFailure(Exception):
    """The reference failed its run of the whole model with every value marked as an output (its message, one line):
    without its values no window can be fed."""


@dataclass(frozen=True)
class Budget:
    """When the search stops early with the smallest window so far (not minimal): after ``runs`` runs of the
    backend, or ``seconds``."""

    runs: int = 400
    seconds: float = 1800.0


def _figures(name: str, comparison: Comparison, reference: str) -> str:
    said = f"max abs {comparison.max_abs:.3g}, " if comparison.max_abs is not None else ""
    found = comparison.exact
    exactly = (
        f"; {found.from_exact:.3g} from exact where {reference} is {found.reference_from_exact:.3g}"
        if found is not None and not found.fault
        else ""
    )
    return f"{name} ({said}{comparison.mismatches} mismatches{_note(comparison.note)}{exactly})"


def symptom_of(parity: Parity, backend: str) -> Symptom | None:
    """What ``parity`` says ``backend`` does where it parts from the reference: its failure, or its outputs outside
    tolerance and beyond float error; None where it does not (or the reference failed: not the backend's doing)."""
    run = parity.backends[backend]
    if run.error is not None:
        return Symptom.failure(run.error)
    if not parity.reference_ran:
        return None
    rejected = parity.rejected(parity.outputs).get(backend, [])
    if not rejected:
        return None
    figures = [_figures(name, parity.outputs[name][backend], parity.reference) for name in rejected]
    size = max(parity.outputs[name][backend].size for name in rejected)
    return Symptom(None, "outputs outside tolerance: " + ", ".join(figures), size=size)


def float_error_only(parity: Parity, backend: str) -> str:
    """The outputs of ``backend`` outside tolerance but within float error, with their figures ("" for none)."""
    floating = [
        _figures(name, by[backend], parity.reference)
        for name, by in parity.outputs.items()
        if backend in by and by[backend].within_float_error
    ]
    return ", ".join(floating)


class Reducer:
    """Runs windows of ``model`` on ``backend`` and tells whether each shows the whole model's symptom, judged as
    ``parity`` judges them: against ``reference`` and, where given, the ``exact`` yardstick."""

    def __init__(
        self,
        model: Model,
        feeds: Mapping[str, np.ndarray],
        backend: Backend,
        reference: Backend,
        tolerance: Tolerance,
        progress: Callable[[str], object],
        exact: Backend | None = None,
    ) -> None:
        self.original = model
        proto = onnx.ModelProto()
        proto.CopyFrom(model.proto)
        sort_topologically(proto)
        self.model = Model(model.path, proto)
        self.types = main_graph_types(proto)
        self.backend, self.reference, self.exact = backend, reference, exact
        self.tolerance, self.progress = tolerance, progress
        self.feeds = dict(feeds)
        marked = divergence.marked(self.model)  # onnx-gather's own work: its failure is not the reference's
        try:
            computed = reference.run(marked, feeds).outputs
        except Exception as error:  # what the reference fails with, as parity reports a backend's failure
            raise ReferenceFailure(one_line(error)) from error
        self.values = {**feeds, **computed}
        self.runs = 0

    def judge(self, model: Model, feeds: Mapping[str, np.ndarray]) -> tuple[Symptom | None, Parity]:
        """What ``parity`` says of the backend on ``model`` and ``feeds`` (rule 1): its symptom, and the run."""
        self.runs += 1
        parity = run_parity(model, Feeds(feeds), [self.backend], self.reference, self.tolerance, exact=self.exact)
        return symptom_of(parity, self.backend.name), parity

    def symptom(self, model: Model) -> Symptom | None:
        """What the backend shows on a window ``model``, fed from the reference's values."""
        return self.judge(model, {value.name: self.values[value.name] for value in model.proto.graph.input})[0]

    def _window(self, kept: tuple[int, ...]) -> Model:
        return Model(self.model.path, window(self.model.proto, set(kept), self.values, self.types))

    def _named(self, positions: tuple[int, ...] | list[int]) -> list[str]:
        nodes = self.model.proto.graph.node
        return [f"{nodes[p].op_type} {node_label(nodes[p], p)!r}" for p in positions]

    def reduce(self, budget: Budget = Budget()) -> Reduction:
        count = len(self.model.proto.graph.node)
        whole, parity = self.judge(self.original, self.feeds)  # the model itself, as the user has it
        for name, run in parity.backends.items():  # it cannot take the model (OpenVINO cannot convert it): exit 4
            if run.status == "skipped":
                raise CannotRun(f"backend {name} cannot take {self.original.path}: {run.reason}")
        if whole is None:
            floating = float_error_only(parity, self.backend.name)
            said = f"; outside tolerance by float error alone: {floating}" if floating else ""
            raise NoDifference(f"{self.backend.name} agrees with {self.reference.name} on every output{said}")
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
