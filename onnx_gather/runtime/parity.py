"""Run one model on several backends and compare every output with the reference's (``onnx-gather parity``)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import onnx

from onnx_gather.core.words import one_line
from onnx_gather.graphs.plumbing import random_nodes
from onnx_gather.graphs.types import ValueType
from onnx_gather.runtime import divergence
from onnx_gather.runtime.backends import Backend, CannotRun, Outcome
from onnx_gather.runtime.comparison import Comparison, Tolerance, compare, exactness, faulty, is_float
from onnx_gather.runtime.divergence import Divergence
from onnx_gather.runtime.inputs import Feeds
from onnx_gather.runtime.model import Model
from onnx_gather.runtime.ties import find_ties

Status = Literal["ok", "error", "skipped"]
# passed: every backend asked for compared every output, within tolerance; partial: so for those that ran, at least
# one besides the reference, while others could not run and that was allowed (backends defaulted, or
# --allow-skipped); incomplete: too little was compared to pass (a backend that was required could not run, or none
# besides the reference compared every output); failed: an output outside tolerance, or a backend's error.
Verdict = Literal["passed", "partial", "incomplete", "failed"]


@dataclass
class BackendRun:
    """What became of one backend: it ran (``ok``), failed (``error``, with the exception) or could not run: not
    here, or not this model (``skipped``, with why)."""

    name: str
    status: Status
    reason: str | None = None  # why it was skipped, or its error on one line
    seconds: float | None = None  # how long a run that succeeded took
    versions: dict[str, str] | None = None  # what it ran on (None when skipped)
    error: Exception | None = None  # the failure, for the caller to say what could avoid it
    outcome: Outcome | None = None  # what it computed, when it ran


def _run(backend: Backend, model: Model, feeds: Feeds) -> BackendRun:
    reason = backend.unavailable() or backend.refusal(model.proto)
    if reason is not None:
        return BackendRun(backend.name, "skipped", reason)
    start = time.perf_counter()
    try:
        outcome = backend.run(model, feeds.arrays)
    except CannotRun as refused:  # it cannot take this model (an operator it lacks): nothing to compare
        return BackendRun(backend.name, "skipped", one_line(refused, typed=False), versions=backend.versions())
    except Exception as error:  # a backend that fails is reported, and the others still run
        return BackendRun(backend.name, "error", one_line(error), versions=backend.versions(), error=error)
    seconds = round(time.perf_counter() - start, 4)
    return BackendRun(backend.name, "ok", seconds=seconds, versions=backend.versions(), outcome=outcome)


@dataclass(frozen=True)
class Declared:
    """An output whose shape, as a backend computed it, contradicts the shape the model declares for it: another
    rank, or a fixed dim that differs (ONNX Runtime's CPU provider warns, its DirectML provider fails on the
    latter)."""

    output: str
    declared: tuple[int | str | None, ...]  # a fixed size, a symbol, or None for a dim left unnamed
    computed: tuple[int, ...]
    backend: str  # which computed it: the reference, or where it did not run, the first backend that did


def contradicted(model: onnx.ModelProto, runs: Mapping[str, BackendRun]) -> list[Declared]:
    """The outputs of ``model`` whose shape, as the first of ``runs`` that computed it has it, contradicts the
    declared one."""
    found = []
    for value in model.graph.output:
        declared = ValueType.of(value)
        ran = [
            (name, run.outcome.outputs[value.name])
            for name, run in runs.items()
            if run.outcome is not None and value.name in run.outcome.outputs
        ]
        if declared is None or declared.dims is None or not ran:
            continue
        name, shape = ran[0][0], ran[0][1].shape
        if len(shape) != len(declared.dims) or any(
            isinstance(dim, int) and dim != size for dim, size in zip(declared.dims, shape, strict=True)
        ):
            found.append(Declared(value.name, declared.dims, tuple(shape), name))
    return found


@dataclass
class Parity:
    """A parity run: each backend's fate and, per output of the model, each backend's comparison with the
    reference's (with ``all_tensors``, the same of a run with every value marked as an output, and per backend the
    first nodes whose outputs differ while their inputs agree)."""

    model: Path
    reference: str
    tolerance: Tolerance
    feeds: Feeds
    backends: dict[str, BackendRun]  # the reference first
    outputs: dict[str, dict[str, Comparison]]  # output -> backend -> comparison with the reference
    out_of_bounds_mode: str
    random_nodes: list[str] = field(default_factory=list)  # nodes that draw new values on every run
    required: frozenset[str] = frozenset()  # backends that must run for the run to pass (named, not allowed to skip)
    strict_ties: bool = False  # outputs apart only by the order of tied keys fail
    declared: list[Declared] = field(default_factory=list)  # outputs of another shape than the model declares
    # ``all_tensors``: the backends' runs with every value marked as an output, every value of those compared
    # (the model's outputs too), and per backend the first divergences
    marked_runs: dict[str, BackendRun] | None = None
    marked: dict[str, dict[str, Comparison]] | None = None
    divergence: dict[str, list[Divergence]] | None = None
    # The exact yardstick's run (None: not asked for, or no float output), and with ``all_tensors`` its marked run
    exact: BackendRun | None = None
    marked_exact: BackendRun | None = None

    @property
    def reference_ran(self) -> bool:
        return self.backends[self.reference].status == "ok"

    @property
    def out_of_bounds(self) -> dict[str, int]:
        """Out-of-bounds index values the reference met, by DML node (``pyop`` counts them)."""
        outcome = self.backends[self.reference].outcome
        return dict(outcome.out_of_bounds) if outcome is not None else {}

    @property
    def compared(self) -> int:
        """How many intermediate values were compared too (``all_tensors``)."""
        return len(self.marked) - len(self.outputs) if self.marked is not None else 0

    @property
    def absent(self) -> dict[str, dict[str, str]]:
        """Per backend, the marked values (``all_tensors``) it could not return, with why."""
        runs = (self.marked_runs or {}).items()
        return {name: run.outcome.absent for name, run in runs if run.outcome and run.outcome.absent}

    @property
    def failures(self) -> list[Exception]:
        """The errors of the backends that failed, in their order (then those of the marked runs)."""
        runs = [*self.backends.values(), *(self.marked_runs or {}).values()]
        return [run.error for run in runs if run.error is not None]

    @property
    def skipped(self) -> dict[str, str]:
        """The backends that could not run (not here, or not this model), with why."""
        return {name: run.reason or "" for name, run in self.backends.items() if run.status == "skipped"}

    @property
    def complete(self) -> list[str]:
        """The backends besides the reference that ran and were compared on every output of the model."""
        return [
            name
            for name, run in self.backends.items()
            if name != self.reference
            and run.status == "ok"
            and all(name in by_backend for by_backend in self.outputs.values())
        ]

    def rejected(self, tensors: Mapping[str, Mapping[str, Comparison]]) -> dict[str, list[str]]:
        """Per backend, the values of ``tensors`` that do not pass: outside tolerance (and not only by tied keys,
        unless ``strict_ties``)."""
        found: dict[str, list[str]] = {}
        for value, by_backend in tensors.items():
            for name, comparison in by_backend.items():
                if not comparison.accepted(self.strict_ties):
                    found.setdefault(name, []).append(value)
        return found

    @property
    def intermediates_rejected(self) -> dict[str, list[str]]:
        """Per backend, the intermediate values (``all_tensors``) that do not pass."""
        intermediates = {name: by for name, by in (self.marked or {}).items() if name not in self.outputs}
        return self.rejected(intermediates)

    @property
    def marking_changed(self) -> list[tuple[str, str, Comparison, Comparison]]:
        """``all_tensors``: the outputs that pass on a backend in one run and not in the other, as (output, backend,
        comparison unmarked, comparison with every value marked)."""
        return [
            (output, name, comparison, marked)
            for output, by_backend in self.outputs.items()
            for name, comparison in by_backend.items()
            if (marked := (self.marked or {}).get(output, {}).get(name)) is not None
            and comparison.accepted(self.strict_ties) != marked.accepted(self.strict_ties)
        ]

    @property
    def verdict(self) -> Verdict:
        if self.failures or self.rejected(self.outputs) or self.rejected(self.marked or {}):
            return "failed"
        if not self.reference_ran or not self.complete or self.required & self.skipped.keys():
            return "incomplete"
        return "partial" if self.skipped else "passed"

    @property
    def passed(self) -> bool:
        """Whether the run passes: every output compared is within tolerance, nothing failed, and what could not run
        was allowed not to (``verdict`` partial) or nothing was left out (passed)."""
        return self.verdict in ("passed", "partial")


def _judged(
    tensors: dict[str, dict[str, Comparison]],
    runs: Mapping[str, BackendRun],
    reference: str,
    exact: Outcome,
    tolerance: Tolerance,
) -> None:
    """Each float output's comparisons of ``tensors`` given their distance from the ``exact`` value, beside the
    reference's (``Comparison.exact``), where the yardstick is not taken to be wrong (``faulty``)."""
    computed = {name: run.outcome.outputs for name, run in runs.items() if run.outcome is not None}
    for output, by_backend in tensors.items():
        wide, ref = exact.outputs.get(output), computed.get(reference, {}).get(output)
        if wide is None or ref is None or not is_float(ref) or not by_backend:
            continue
        fault = faulty([ref, *(computed[name][output] for name in by_backend)], wide, tolerance)
        for name, comparison in by_backend.items():
            found = exactness(ref, computed[name][output], wide, tolerance, fault)
            by_backend[name] = dataclasses.replace(comparison, exact=found)


def _compared(
    model: Model, feeds: Feeds, order: Sequence[Backend], tolerance: Tolerance, exact: Backend | None
) -> tuple[dict[str, BackendRun], dict[str, dict[str, Comparison]], BackendRun | None]:
    """Each backend of ``order`` (the reference first) run on ``model``, and every output of it compared with the
    reference's, float outputs judged against ``exact``'s too (run where the reference gave a float output); those
    apart only by the order of tied keys say so (``Comparison.ties``)."""
    runs = {backend.name: _run(backend, model, feeds) for backend in order}
    expected = runs[order[0].name].outcome
    tensors: dict[str, dict[str, Comparison]] = {name: {} for name in model.output_names}
    for backend in order[1:]:
        outcome = runs[backend.name].outcome
        if expected is None or outcome is None:
            continue
        for output in model.output_names:
            if output in expected.outputs and output in outcome.outputs:  # else a marked value it did not return
                tensors[output][backend.name] = compare(expected.outputs[output], outcome.outputs[output], tolerance)
    yardstick = None
    if exact is not None and expected is not None and any(map(is_float, expected.outputs.values())):
        yardstick = _run(exact, model, feeds)
        if yardstick.outcome is not None:
            _judged(tensors, runs, order[0].name, yardstick.outcome, tolerance)
    for backend in order[1:]:
        outcome = runs[backend.name].outcome
        differing = [name for name, by in tensors.items() if backend.name in by and not by[backend.name].accepted(True)]
        if differing and outcome is not None:
            ties = find_ties(model, feeds.arrays, order[0], backend, outcome, differing, tolerance)
            for name, found in ties.items():
                tensors[name][backend.name] = dataclasses.replace(tensors[name][backend.name], ties=found)
    return runs, tensors, yardstick


def run_parity(
    model: Model,
    feeds: Feeds,
    backends: Sequence[Backend],
    reference: Backend,
    tolerance: Tolerance,
    *,
    all_tensors: bool = False,
    required: frozenset[str] = frozenset(),
    strict_ties: bool = False,
    exact: Backend | None = None,
) -> Parity:
    """Run ``model`` on ``reference`` and then each of ``backends`` (built once by the caller; one named as the
    reference is not run twice), and compare every output with the reference's. ``all_tensors``: each is run again
    with every intermediate value marked as an output, every value is compared, and ``divergence`` names, per
    backend, the first nodes whose outputs differ while their inputs agree (the unmarked run's outputs are judged
    all the same: marking can change what a backend fuses). ``required``: the backends whose skipping leaves the run
    incomplete (those the user named); the others may be skipped as long as one besides the reference compares every
    output. ``strict_ties``: an output apart only by the order of tied keys fails. ``exact``: the yardstick float
    outputs are judged against too (``Comparison.exact``), never itself judged."""
    order = [reference, *(backend for backend in backends if backend.name != reference.name)]
    runs, outputs, yardstick = _compared(model, feeds, order, tolerance, exact)
    parity = Parity(
        model.path,
        reference.name,
        tolerance,
        feeds,
        runs,
        outputs,
        reference.out_of_bounds,
        random_nodes(model.proto),
        required,
        strict_ties,
        contradicted(model.proto, runs),
        exact=yardstick,
    )
    if all_tensors:
        marked = divergence.marked(model)
        parity.marked_runs, parity.marked, parity.marked_exact = _compared(marked, feeds, order, tolerance, exact)
        parity.divergence = {
            name: divergence.first_divergences(model.proto, parity.marked, name, run.outcome, strict_ties)
            for name, run in parity.marked_runs.items()
            if run.outcome is not None and name != reference.name
        }
    return parity
