"""Run one model on several backends and compare every output with the reference's (``onnx-gather parity``)."""

from __future__ import annotations

import contextlib
import importlib.metadata
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from onnx_gather.core.contract import DML_OP_TYPES
from onnx_gather.directml.process import DirectMlError, RunnerError
from onnx_gather.graphs.lower import LoweringError
from onnx_gather.graphs.plumbing import random_nodes
from onnx_gather.runtime import backends as backends_module
from onnx_gather.runtime import divergence
from onnx_gather.runtime.backends import Model
from onnx_gather.runtime.inputs import dims_text


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

    def as_report(self) -> dict:
        report = asdict(self)
        if not self.note:
            del report["note"]  # else it says what differs: types, shapes
        return report


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


def failure_hint(error: BaseException, inputs_hint: str) -> str:
    """What the user can do about a backend's failure: run DML ops with the pyop backend; give other inputs where
    they can explain it (``inputs_hint``: generated integers out of an index's range, generated dynamic dims of 1);
    nothing where the device is the problem, or the lowering (its error names the node and why)."""
    if isinstance(error, backends_module.DeviceError | RunnerError | LoweringError):
        return ""  # the device, the DirectML runner's end (out of memory, time limit), the lowering: not the inputs
    if any(op_type in str(error) for op_type in DML_OP_TYPES):
        return ("the model holds onnx-gather's DML ops, which only the pyop backend runs: use --backend pyop, or "
                "`onnx-gather lower` it into standard ONNX first")  # fmt: skip
    if isinstance(error, DirectMlError):
        known = "DirectML failures known on Windows too are listed in onnx-gather's README, 'Known DirectML failures'"
        return f"{inputs_hint}; {known}" if inputs_hint else known
    return inputs_hint


def _run_all(
    model: Model, feeds: Mapping[str, np.ndarray], names: Sequence[str], reference: str, device_id: int,
    out_of_bounds: str, hint: Callable[[BaseException], str], starting: Callable[[str], object],
) -> tuple[dict[str, dict], dict[str, backends_module.Outcome], list[str]]:  # fmt: skip
    """Every backend named (the reference first): their statuses, what those that ran computed, and hints."""
    statuses, outcomes, hints = {}, {}, []
    for name in [reference, *[name for name in names if name != reference]]:
        backend = backends_module.create(name, device_id, out_of_bounds)
        reason = backend.unavailable()
        if reason is not None:
            statuses[name] = {"status": "skipped", "reason": reason, "seconds": None}
            continue
        starting(name)
        start = time.perf_counter()
        try:
            outcomes[name] = backend.run(model, feeds)
        except Exception as error:  # a backend that fails is reported, and the others still run
            statuses[name] = {"status": "error", "reason": one_line(error), "seconds": None}
            hints.append(failure_hint(error, hint(error)))
        else:
            statuses[name] = {"status": "ok", "reason": None, "seconds": round(time.perf_counter() - start, 4)}
        statuses[name]["versions"] = backend.versions()
        if name not in outcomes:
            continue
        if outcomes[name].placement:
            statuses[name]["placement"] = outcomes[name].placement
    return statuses, outcomes, hints


@dataclass
class Parity:
    """A parity run: the report (the JSON report's keys exactly) and, for the table, what differed in shape."""

    report: dict
    notes: dict[tuple[str, str], str]  # (output, backend) -> what differs where no position-wise comparison exists
    outcomes: dict[str, backends_module.Outcome]  # what each backend that ran computed


def run_parity(
    model: Model,
    feeds: Mapping[str, np.ndarray],
    names: Sequence[str],
    reference: str = "pyop",
    atol: float = 1e-5,
    rtol: float = 1e-5,
    device_id: int = 0,
    out_of_bounds: str = "directml",
    hint: Callable[[BaseException], str] = lambda error: "",
    all_tensors: bool = False,
    seed: int | None = None,
    given: Collection[str] = (),
    starting: Callable[[str], object] = lambda name: None,
) -> Parity:
    """Run ``model`` on the ``names`` backends (the reference first) and compare every output with the reference's.
    ``hint`` says, for a backend's error, what other inputs could avoid it (generated integers beyond an index's
    range, dynamic dims generated as 1); it goes into the report with ``failure_hint``. The report lists the
    inputs: with a ``seed``, those not named in ``given`` as generated from it, else all as given. ``starting`` is
    called with each backend's name as it starts (for progress).
    ``all_tensors``: every intermediate value is compared too, and the report's ``divergence`` names, per backend,
    the first nodes whose outputs differ while their inputs agree."""
    with divergence.marked(model) if all_tensors else contextlib.nullcontext(model) as wide:
        statuses, outcomes, hints = _run_all(wide, feeds, names, reference, device_id, out_of_bounds, hint, starting)
    tensors: dict[str, dict] = {name: {} for name in wide.output_names}
    expected = outcomes.get(reference)
    notes: dict[tuple[str, str], str] = {}
    if expected is not None:
        for name, outcome in outcomes.items():
            if name == reference:
                continue
            for output in wide.output_names:
                comparison = compare(expected.outputs[output], outcome.outputs[output], atol, rtol)
                tensors[output][name] = comparison.as_report()
                if comparison.note:
                    notes[(output, name)] = comparison.note
    outputs = {name: tensors[name] for name in model.output_names}
    generated = set(feeds) - set(given) if seed is not None else set()
    passed = expected is not None and all(s["status"] != "error" for s in statuses.values())
    passed = passed and all(c["within_tolerance"] for by_backend in outputs.values() for c in by_backend.values())
    report = {
        "model": str(model.path),
        "reference": reference,
        "atol": float(atol),
        "rtol": float(rtol),
        "inputs": {
            name: {
                "dtype": array.dtype.name,
                "shape": list(array.shape),
                "source": "generated" if name in generated else "given",
            }
            for name, array in feeds.items()
        },
        "seed": seed if generated else None,
        "onnx_gather": importlib.metadata.version("onnx-gather"),
        "backends": statuses,
        "outputs": outputs,
        "out_of_bounds": dict(expected.out_of_bounds) if expected is not None else {},
        "out_of_bounds_mode": out_of_bounds,
        "passed": bool(passed),
    }
    if any(hints):
        report["hint"] = "; ".join(dict.fromkeys(h for h in hints if h))
    drawing = random_nodes(model.proto)
    if drawing:
        report["random_nodes"] = drawing
    if all_tensors:
        report["all_tensors"] = {"compared": len(tensors) - len(outputs), "note": divergence.NOTE}
        report["divergence"] = {
            name: divergence.first_divergences(model.proto, tensors, name, statuses[name].get("placement", {}))
            for name in outcomes if name != reference
        }  # fmt: skip
    return Parity(report, notes, outcomes)
