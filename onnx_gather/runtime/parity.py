"""Run one model on several backends and compare every output with the reference's (``onnx-gather parity``)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from onnx_gather.graphs.plumbing import random_nodes
from onnx_gather.runtime import divergence
from onnx_gather.runtime.backends import Backend, Model, Outcome
from onnx_gather.runtime.divergence import Divergence
from onnx_gather.runtime.inputs import Feeds, dims_text


@dataclass(frozen=True)
class Tolerance:
    """How far an output may be from the reference's: ``|actual - reference| <= atol + rtol * |reference|``."""

    atol: float = 1e-5
    rtol: float = 1e-5


@dataclass(frozen=True)
class Comparison:
    """One output of one backend against the reference's."""

    equal: bool  # same type, shape and bytes
    within_tolerance: bool  # |actual - reference| <= atol + rtol * |reference| everywhere, NaN meeting NaN
    max_abs: float | None  # over the positions where both are finite; None for STRING and BOOL outputs
    max_rel: float | None  # the same, relative to a nonzero reference
    mismatches: int  # positions outside the tolerance (all of them when the shapes or types differ)
    first_mismatch: list[int] | None
    note: str = ""  # what differs when the comparison cannot be made position by position


def _integer_difference(reference: np.ndarray, actual: np.ndarray) -> np.ndarray:
    """``|actual - reference|`` exactly, as UINT64 (wrapping arithmetic: 64-bit integers never overflow here)."""
    wide = np.uint64 if reference.dtype == np.uint64 else np.int64
    ref, act = reference.astype(wide), actual.astype(wide)
    ref_bits, act_bits = ref.view(np.uint64), act.view(np.uint64)
    return np.where(act >= ref, act_bits - ref_bits, ref_bits - act_bits)


def compare(reference: np.ndarray, actual: np.ndarray, atol: float, rtol: float) -> Comparison:
    """Compare ``actual`` with ``reference`` position by position."""
    textual = reference.dtype.kind in "OUS" and actual.dtype.kind in "OUS"  # runtimes hold strings differently
    if reference.shape != actual.shape or (reference.dtype != actual.dtype and not textual):
        note = (
            f"{actual.dtype.name} {dims_text(actual.shape)} where the reference has {reference.dtype.name} "
            f"{dims_text(reference.shape)}"
        )
        return Comparison(False, False, None, None, max(reference.size, actual.size), None, note)
    if reference.dtype.kind not in "fiu":  # STRING and BOOL: equal or not, never numbers
        bad = np.argwhere(reference.astype(object) != actual.astype(object))
        first = [int(i) for i in bad[0]] if len(bad) else None
        return Comparison(not len(bad), not len(bad), None, None, len(bad), first)
    magnitude = np.abs(reference.astype(np.float64))
    if reference.dtype.kind == "f":
        ref, act = reference.astype(np.float64), actual.astype(np.float64)
        finite = np.isfinite(ref) & np.isfinite(act)
        difference = np.abs(np.subtract(act, ref, out=np.zeros_like(ref), where=finite))
        close = np.where(finite, difference <= atol + rtol * magnitude, (ref == act) | (np.isnan(ref) & np.isnan(act)))
    else:
        exact = _integer_difference(reference, actual)
        finite = np.ones(reference.shape, bool)
        difference = exact.astype(np.float64)
        close = (exact == 0) | (difference <= atol + rtol * magnitude)
    nonzero = finite & (magnitude != 0)
    relative = np.where(nonzero, difference / np.where(nonzero, magnitude, 1.0), 0.0)
    bad = np.argwhere(~close)
    return Comparison(
        equal=reference.tobytes() == actual.tobytes(),
        within_tolerance=bool(close.all()),
        max_abs=float(difference.max()) if difference.size else 0.0,
        max_rel=float(relative.max()) if relative.size else 0.0,
        mismatches=len(bad),
        first_mismatch=[int(i) for i in bad[0]] if len(bad) else None,
    )


def one_line(error: BaseException, typed: bool = True) -> str:
    """The error on one line, in full, without the bare source locations some runtimes stack in front of it."""
    lines = [line.strip() for line in str(error).splitlines()]
    text = " ".join(line for line in lines if line and not line.startswith("Exception from "))
    text = text or type(error).__name__
    return f"{type(error).__name__}: {text}" if typed else text


Status = Literal["ok", "error", "skipped"]


@dataclass
class BackendRun:
    """What became of one backend: it ran (``ok``), failed (``error``, with the exception) or could not run here
    (``skipped``, with why)."""

    name: str
    status: Status
    reason: str | None = None  # why it was skipped, or its error on one line
    seconds: float | None = None  # how long a run that succeeded took
    versions: dict[str, str] | None = None  # what it ran on (None when skipped)
    error: Exception | None = None  # the failure, for the caller to say what could avoid it
    outcome: Outcome | None = None  # what it computed, when it ran


def _run(backend: Backend, model: Model, feeds: Feeds, starting: Callable[[str], object]) -> BackendRun:
    reason = backend.unavailable()
    if reason is not None:
        return BackendRun(backend.name, "skipped", reason)
    starting(backend.name)
    start = time.perf_counter()
    try:
        outcome = backend.run(model, feeds.arrays)
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

    @property
    def reference_ran(self) -> bool:
        return self.backends[self.reference].status == "ok"

    @property
    def out_of_bounds(self) -> dict[str, int]:
        """Out-of-bounds index values the reference met, by DML node (``pyop`` counts them)."""
        outcome = self.backends[self.reference].outcome
        return dict(outcome.out_of_bounds) if outcome is not None else {}

    @property
    def failures(self) -> list[Exception]:
        """The errors of the backends that failed, in their order."""
        return [run.error for run in self.backends.values() if run.error is not None]

    @property
    def passed(self) -> bool:
        within = all(c.within_tolerance for by_backend in self.outputs.values() for c in by_backend.values())
        return self.reference_ran and not self.failures and within


def run_parity(
    model: Model,
    feeds: Feeds,
    backends: Sequence[Backend],
    reference: Backend,
    tolerance: Tolerance,
    *,
    all_tensors: bool = False,
    starting: Callable[[str], object] = lambda name: None,
) -> Parity:
    """Run ``model`` on ``reference`` and then each of ``backends`` (built once by the caller; one named as the
    reference is not run twice), and compare every output with the reference's. ``starting`` is told each backend's
    name as it starts (for progress). ``all_tensors``: every intermediate value is compared too, and ``divergence``
    names, per backend, the first nodes whose outputs differ while their inputs agree."""
    order = [reference, *(backend for backend in backends if backend.name != reference.name)]
    with divergence.marked(model) if all_tensors else contextlib.nullcontext(model) as wide:
        runs = {backend.name: _run(backend, wide, feeds, starting) for backend in order}
    expected = runs[reference.name].outcome
    tensors: dict[str, dict[str, Comparison]] = {name: {} for name in wide.output_names}
    for name, run in runs.items():
        if expected is None or run.outcome is None or name == reference.name:
            continue
        for output in wide.output_names:
            actual = run.outcome.outputs[output]
            tensors[output][name] = compare(expected.outputs[output], actual, tolerance.atol, tolerance.rtol)
    parity = Parity(
        model.path, reference.name, tolerance, feeds, runs, {name: tensors[name] for name in model.output_names},
        reference.out_of_bounds, random_nodes(model.proto),
    )  # fmt: skip
    if all_tensors:
        parity.compared = len(tensors) - len(model.output_names)
        parity.divergence = {
            name: divergence.first_divergences(model.proto, tensors, name, run.outcome.placement)
            for name, run in runs.items() if run.outcome is not None and name != reference.name
        }  # fmt: skip
    return parity
