"""What a parity run found besides its outputs' comparisons, in words and as the JSON report holds it: ties, outputs
of another shape than the model declares, and the run with every value marked (``--all-tensors``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

from onnx_gather.core.words import counted, listed
from onnx_gather.runtime import divergence, exact
from onnx_gather.runtime.comparison import Comparison
from onnx_gather.runtime.divergence import Divergence
from onnx_gather.runtime.inputs import dims_text
from onnx_gather.runtime.parity import Declared, Parity

SHOWN = 5  # the names a line of the report shows of a list: the JSON report (--report) holds them all


def shown(names: Sequence[str], quoted: bool = True) -> str:
    """A list of names as a line of the report holds it: the first ``SHOWN``, and where it cuts the rest, where they
    all are, so that a list of thousands stays a line people read."""
    text = listed(names, SHOWN, quoted)
    return f"{text}, all in --report" if len(names) > SHOWN else text


def figure(value: float | None) -> str:
    """A figure of a comparison, short: "" for none (STRING and BOOL outputs are compared for equality only)."""
    if value is None:
        return ""
    return "0" if value == 0 else f"{value:.3g}"


def comparison_entry(comparison: Comparison) -> dict:
    """A comparison as the JSON report holds it."""
    report = asdict(comparison)
    if not comparison.note:
        del report["note"]  # else it says what differs: types, shapes
    if not comparison.ties:
        del report["ties"]  # else the sort-like nodes that ordered tied keys otherwise
    if comparison.exact is None:
        del report["exact"]  # else its distance from the exact value beside the reference's
    else:
        report["exact"]["within_float_error"] = comparison.within_float_error
        report["exact"]["reference_less_accurate"] = comparison.exact.reference_less_accurate
    report["excess"] = None if comparison.excess == float("inf") else comparison.excess  # JSON has no infinity
    return report


def verdict(comparison: Comparison) -> str:
    """A comparison's verdict, as the report's table says it."""
    if comparison.note:
        return "DIFFERENT: " + comparison.note
    if comparison.equal:
        return "bit-identical"
    if comparison.within_tolerance:
        return "within tolerance"
    if comparison.within_float_error:
        return "within float error"
    if comparison.ties:
        return "TIED: " + "; ".join(
            f"{'row' if len(tie.rows) == 1 else 'rows'} {listed(map(str, tie.rows), quoted=False)} of {tie.op_type} "
            f"{tie.node!r}, key gap {figure(tie.key_gap)}"
            for tie in comparison.ties
        )
    return "DIFFERENT"


def from_exact(comparison: Comparison) -> str:
    """The table's "from exact": the backend's max abs distance from the exact value; "" where not judged."""
    return figure(comparison.exact.from_exact) if comparison.exact is not None else ""


def exact_lines(parity: Parity) -> list[str]:
    """What the exact yardstick says beyond the table: outputs where the reference is the less accurate, outputs
    where the yardstick is taken to be wrong, and that it could not run."""
    run = parity.exact
    if run is None:
        return []
    if run.status != "ok":
        return ["The exact yardstick could not run (see its row above): float outputs are judged by tolerance only."]
    lines = []
    for output, by_backend in parity.outputs.items():
        judged = {name: c.exact for name, c in by_backend.items() if c.exact is not None}
        if not judged:
            continue
        first = next(iter(judged.values()))
        if first.fault:
            lines.append(
                f"Output {output!r}: every backend is {figure(min(e.from_exact for e in judged.values()))} or more "
                f"from the exact value (the reference {figure(first.reference_from_exact)}) while near each other: "
                "the yardstick is taken to be wrong there, and the output judged by tolerance only."
            )
            continue
        nearer = [name for name, found in judged.items() if found.reference_less_accurate]
        if nearer:
            figures = ", ".join(f"{name} {figure(judged[name].from_exact)}" for name in nearer)
            lines.append(
                f"Output {output!r}: the reference {parity.reference} is the less accurate, "
                f"{figure(first.reference_from_exact)} from the exact value (max abs) where {figures}."
            )
    return lines


def exact_entry(parity: Parity) -> dict | None:
    """The exact yardstick's run, as the JSON report's ``exact``: its status, time and routes."""
    run = parity.exact
    if run is None:
        return None
    entry: dict = {"status": run.status, "reason": run.reason, "seconds": run.seconds}
    routes = run.outcome.routes if run.outcome is not None else None
    if routes is not None:
        entry["routes"] = {route: dict(ops) for route, ops in routes.ops.items()}
        entry["kept"] = routes.kept
        entry["stretches"] = routes.stretches
    return entry


def routes_said(parity: Parity) -> str:
    """How the exact yardstick computed the model, for the backends table."""
    run = parity.exact
    routes = run.outcome.routes if run is not None and run.outcome is not None else None
    if routes is None:
        return run.reason or "" if run is not None else ""
    parts = []
    for route, ops in routes.ops.items():
        if ops:
            kinds = listed([f"{op} {count}" for op, count in ops.most_common()], 4, quoted=False)
            parts.append(f"{counted(ops.total(), 'node')} by {ROUTE_WORDS[route]} ({kinds})")
    kept = f", {counted(len(routes.kept), 'node')} in their own type (no float64 form)" if routes.kept else ""
    return f"yardstick, float64: {'; '.join(parts)}{kept}"


ROUTE_WORDS = {exact.ONNXRUNTIME: "ONNX Runtime's CPU kernels", exact.EVALUATOR: "onnx's reference evaluator"}


def float_error_backends(parity: Parity) -> list[str]:
    """The backends with an output outside tolerance but within float error."""
    found = {name for by in parity.outputs.values() for name, c in by.items() if c.within_float_error}
    return [name for name in parity.backends if name in found]


def tied_backends(parity: Parity) -> list[str]:
    """The backends with an output outside tolerance only by the order of tied keys."""
    tied = {name for by in parity.outputs.values() for name, c in by.items() if c.ties and not c.within_tolerance}
    return [name for name in parity.backends if name in tied]


def _declared(entry: Declared) -> str:
    return "[" + ", ".join("?" if dim is None else str(dim) for dim in entry.declared) + "]"


def declared_lines(parity: Parity) -> list[str]:
    """The outputs of another shape than the model declares for them."""
    lines = []
    for entry in parity.declared:
        who = f"the reference {entry.backend}" if entry.backend == parity.reference else entry.backend
        lines.append(
            f"Output {entry.output!r}: the model declares {_declared(entry)}, {who} computed "
            f"{dims_text(entry.computed)} (ONNX Runtime's CPU provider warns of it; its DirectML provider "
            "fails where a fixed dim differs at the same rank)."
        )
    return lines


def declared_entry(parity: Parity) -> dict:
    """The same, as the JSON report's ``declared_shapes``."""
    return {
        entry.output: {"declared": list(entry.declared), "computed": list(entry.computed), "backend": entry.backend}
        for entry in parity.declared
    }


def _state(comparison: Comparison, strict_ties: bool) -> str:
    if comparison.accepted(strict_ties):
        return "within tolerance" if comparison.within_tolerance else "apart only by the order of tied keys"
    return f"outside tolerance (max abs {figure(comparison.max_abs)})" if comparison.max_abs else "different"


def _judged_exactly(parity: Parity) -> bool:
    """Whether the marked run's values were judged against the exact yardstick (it ran on them)."""
    return parity.marked_exact is not None and parity.marked_exact.status == "ok"


def marked_lines(parity: Parity) -> list[str]:
    """With --all-tensors: what the run with every value marked compared, what it could not return, the values
    outside tolerance, the outputs whose verdict marking changed, and per backend the first nodes whose outputs
    differ while their inputs agree."""
    if parity.divergence is None or parity.marked_runs is None:
        return []
    lines = [f"All tensors: {parity.compared} intermediate values compared too ({divergence.NOTE})."]
    for backend, absent in parity.absent.items():
        lines.append(f"{backend} could not return {len(absent)} of them, left out:")
        by_reason: dict[str, list[str]] = {}
        for name, reason in absent.items():
            by_reason.setdefault(reason, []).append(name)
        for reason, names in sorted(by_reason.items()):
            lines.append(f"  {counted(len(names), 'value')} ({shown(names)}): {reason}")
    for backend, run in parity.marked_runs.items():
        if run.status == "error" and parity.backends[backend].status != "error":
            lines.append(f"{backend} failed with every value marked: {run.reason}")
    for backend, values in parity.intermediates_rejected.items():
        lines.append(f"{backend}: {counted(len(values), 'intermediate value')} outside tolerance: {shown(values)}.")
    for output, backend, unmarked, marked in parity.marking_changed:
        lines.append(
            f"Output {output!r} on {backend}: {_state(unmarked, parity.strict_ties)} as the model runs, "
            f"{_state(marked, parity.strict_ties)} with every value marked: marking values as outputs "
            "stops fusions, so the unmarked run is the one that counts."
        )
    for backend, found in parity.divergence.items():
        if not found:
            beyond = "tolerance and float error" if _judged_exactly(parity) else "tolerance"
            lines.append(f"{backend}: no node's outputs differ beyond {beyond} while its inputs agree.")
            continue
        lines.append(f"{backend}: first nodes whose outputs differ while their inputs agree, in topological order:")
        for entry in found:
            where = f", on {entry.placement}" if entry.placement is not None else ""
            figures = f"max abs {figure(entry.comparison.max_abs)}, max rel {figure(entry.comparison.max_rel)}"
            lines.append(
                f"  node {entry.node!r} ({entry.op_type}{where}): output {entry.output!r}, "
                f"{figures}, {entry.comparison.mismatches} mismatches"
            )
    return lines


def _divergence_entry(found: Divergence) -> dict:
    entry = {
        "node": found.node,
        "op_type": found.op_type,
        "output": found.output,
        "max_abs": found.comparison.max_abs,
        "max_rel": found.comparison.max_rel,
        "mismatches": found.comparison.mismatches,
    }
    if found.placement is not None:
        entry["placement"] = found.placement
    return entry


def marked_entries(parity: Parity) -> dict:
    """With --all-tensors, the JSON report's ``all_tensors`` and ``divergence``; else nothing."""
    if parity.divergence is None or parity.marked_runs is None:
        return {}
    changed = [
        {
            "output": output,
            "backend": backend,
            "unmarked": comparison_entry(unmarked),
            "marked": comparison_entry(marked),
        }
        for output, backend, unmarked, marked in parity.marking_changed
    ]
    errors = {name: run.reason for name, run in parity.marked_runs.items() if run.status == "error"}
    return {
        "all_tensors": {
            "compared": parity.compared,
            "absent": parity.absent,
            "note": divergence.NOTE,
            "rejected": parity.intermediates_rejected,
            "marking_changed": changed,
            "errors": errors,
        },
        "divergence": {name: list(map(_divergence_entry, found)) for name, found in parity.divergence.items()},
    }
