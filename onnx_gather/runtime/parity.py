"""Run one model on several backends and compare every output with the reference's (``onnx-gather parity``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from onnx_gather.graphs.plumbing import random_nodes
from onnx_gather.runtime import divergence
from onnx_gather.runtime.backends import Backend, CannotRun, Model, Outcome
from onnx_gather.runtime.comparison import Comparison, Tolerance, compare
from onnx_gather.runtime.divergence import Divergence
from onnx_gather.runtime.inputs import Feeds


def one_line(error: BaseException, typed: bool = True) -> str:
    """The error on one line, in full, without the bare source locations some runtimes stack in front of it."""
    lines = [line.strip() for line in str(error).splitlines()]
    text = " ".join(line for line in lines if line and not line.startswith("Exception from "))
    text = text or type(error).__name__
    return f"{type(error).__name__}: {text}" if typed else text


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


@dataclass
class Parity:
    """A parity run: each backend's fate and, per output of the model, each backend's comparison with the
    reference's (with ``all_tensors``, per backend the first nodes whose outputs differ while their inputs agree)."""

    model: Path
    reference: str
    tolerance: Tolerance
    feeds: Feeds
    backends: dict[str, BackendRun]  # the reference first
    outputs: dict[str, dict[str, Comparison]]  # output -> backend -> comparison with the reference
    out_of_bounds_mode: str
    random_nodes: list[str] = field(default_factory=list)  # nodes that draw new values on every run
    compared: int = 0  # intermediate values compared too (``all_tensors``)
    divergence: dict[str, list[Divergence]] | None = None  # backend -> first divergences (``all_tensors``)
    required: frozenset[str] = frozenset()  # backends that must run for the run to pass (named, not allowed to skip)

    @property
    def reference_ran(self) -> bool:
        return self.backends[self.reference].status == "ok"

    @property
    def out_of_bounds(self) -> dict[str, int]:
        """Out-of-bounds index values the reference met, by DML node (``pyop`` counts them)."""
        outcome = self.backends[self.reference].outcome
        return dict(outcome.out_of_bounds) if outcome is not None else {}

    @property
    def absent(self) -> dict[str, dict[str, str]]:
        """Per backend, the marked values (``all_tensors``) it could not return, with why."""
        return {name: run.outcome.absent for name, run in self.backends.items() if run.outcome and run.outcome.absent}

    @property
    def failures(self) -> list[Exception]:
        """The errors of the backends that failed, in their order."""
        return [run.error for run in self.backends.values() if run.error is not None]

    @property
    def skipped(self) -> dict[str, str]:
        """The backends that could not run (not here, or not this model), with why."""
        return {name: run.reason or "" for name, run in self.backends.items() if run.status == "skipped"}

    @property
    def complete(self) -> list[str]:
        """The backends besides the reference that ran and were compared on every output of the model."""
        return [name for name, run in self.backends.items() if name != self.reference and run.status == "ok"
                and all(name in by_backend for by_backend in self.outputs.values())]  # fmt: skip

    @property
    def verdict(self) -> Verdict:
        within = all(c.within_tolerance for by_backend in self.outputs.values() for c in by_backend.values())
        if self.failures or not within:
            return "failed"
        if not self.reference_ran or not self.complete or self.required & self.skipped.keys():
            return "incomplete"
        return "partial" if self.skipped else "passed"

    @property
    def passed(self) -> bool:
        """Whether the run passes: every output compared is within tolerance, nothing failed, and what could not run
        was allowed not to (``verdict`` partial) or nothing was left out (passed)."""
        return self.verdict in ("passed", "partial")


def run_parity(
    model: Model,
    feeds: Feeds,
    backends: Sequence[Backend],
    reference: Backend,
    tolerance: Tolerance,
    *,
    all_tensors: bool = False,
    required: frozenset[str] = frozenset(),
) -> Parity:
    """Run ``model`` on ``reference`` and then each of ``backends`` (built once by the caller; one named as the
    reference is not run twice), and compare every output with the reference's. ``all_tensors``: every intermediate
    value is compared too, and ``divergence`` names, per backend, the first nodes whose outputs differ while their
    inputs agree. ``required``: the backends whose skipping leaves the run incomplete (those the user named); the
    others may be skipped as long as one besides the reference compares every output."""
    order = [reference, *(backend for backend in backends if backend.name != reference.name)]
    wide = divergence.marked(model) if all_tensors else model
    runs = {backend.name: _run(backend, wide, feeds) for backend in order}
    expected = runs[reference.name].outcome
    tensors: dict[str, dict[str, Comparison]] = {name: {} for name in wide.output_names}
    for name, run in runs.items():
        if expected is None or run.outcome is None or name == reference.name:
            continue
        for output in wide.output_names:
            if output in expected.outputs and output in run.outcome.outputs:  # else a marked value it did not return
                tensors[output][name] = compare(expected.outputs[output], run.outcome.outputs[output], tolerance)
    parity = Parity(
        model.path, reference.name, tolerance, feeds, runs, {name: tensors[name] for name in model.output_names},
        reference.out_of_bounds, random_nodes(model.proto), required=required,
    )  # fmt: skip
    if all_tensors:
        parity.compared = len(tensors) - len(model.output_names)
        parity.divergence = {
            name: divergence.first_divergences(model.proto, tensors, name, run.outcome)
            for name, run in runs.items() if run.outcome is not None and name != reference.name
        }  # fmt: skip
    return parity
