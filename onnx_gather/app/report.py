"""A parity run as people read it (a table for the terminal, or Markdown) and as programs do (the JSON report):
made here only, from the typed results, with the hint the caller worded."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from onnx_gather.app import findings
from onnx_gather.app.findings import comparison_entry, figure
from onnx_gather.graphs.types import array_type
from onnx_gather.runtime.comparison import Comparison
from onnx_gather.runtime.inputs import Feeds, dims_text
from onnx_gather.runtime.parity import BackendRun, Parity


@dataclass(frozen=True)
class Reported:
    """A parity run, the hint its caller worded from its failures ("" for none) and, for the HTML page of a run
    with ``--all-tensors``, the picture of the model with its divergences marked (``parity_page.marked_picture``)."""

    parity: Parity
    hint: str = ""
    picture: list[dict] | None = None


def _outputs(by_backend: Mapping[str, Comparison]) -> dict:
    return {name: comparison_entry(comparison) for name, comparison in by_backend.items()}


def _backend(run: BackendRun) -> dict:
    entry: dict = {"status": run.status, "reason": run.reason, "seconds": run.seconds}
    if run.versions is not None:
        entry["versions"] = run.versions
    if run.outcome is not None and run.outcome.placement:
        entry["placement"] = run.outcome.placement
    if run.outcome is not None and run.outcome.notes:
        entry["notes"] = run.outcome.notes
    return entry


def _notes(parity: Parity) -> list[str]:
    """What makes some outputs of a backend unreliable, backend by backend."""
    return [f"{name}: {note}." for name, run in parity.backends.items() if run.outcome for note in run.outcome.notes]


def _input(name: str, array: np.ndarray, feeds: Feeds) -> dict:
    entry = {"dtype": array_type(array.dtype), "shape": list(array.shape), "source": feeds.source(name)}
    if name in feeds.drawn:
        entry["drawn"] = feeds.drawn[name]
    return entry


def inputs_lines(feeds: Feeds) -> list[str]:
    """The inputs a model ran on, where they came from and how generated ones were drawn; and the warning on
    dynamic dims generated as 1, where there are such."""
    listed = ", ".join(
        f"{name} {array_type(array.dtype)} {dims_text(array.shape)} ({feeds.said(name)})"
        for name, array in feeds.arrays.items()
    )
    seed = f", with --seed {feeds.seed}" if feeds.generated and feeds.seed is not None else ""
    return [f"Inputs: {listed or 'none'}{seed}.", *([f"Warning: {feeds.warning}."] if feeds.warning else [])]


def document(reported: Reported) -> dict:
    """The JSON report of one model's run."""
    parity, feeds = reported.parity, reported.parity.feeds
    report = {
        "model": str(parity.model),
        "reference": parity.reference,
        "atol": parity.tolerance.atol,  # as given; null: each output's type's (its comparisons say which)
        "rtol": parity.tolerance.rtol,
        "inputs": {name: _input(name, array, feeds) for name, array in feeds.arrays.items()},
        "seed": feeds.seed if feeds.generated else None,
        "onnx_gather": importlib.metadata.version("onnx-gather"),
        "backends": {name: _backend(run) for name, run in parity.backends.items()},
        "outputs": {output: _outputs(by) for output, by in parity.outputs.items()},
        "out_of_bounds": parity.out_of_bounds,
        "out_of_bounds_mode": parity.out_of_bounds_mode,
        "verdict": parity.verdict,
        "passed": parity.passed,
    }
    if reported.hint:
        report["hint"] = reported.hint
    if feeds.warning:
        report["warning"] = feeds.warning
    if parity.random_nodes:
        report["random_nodes"] = parity.random_nodes
    if parity.declared:
        report["declared_shapes"] = findings.declared_entry(parity)
    if parity.strict_ties:
        report["strict_ties"] = True
    exact = findings.exact_entry(parity)
    if exact is not None:
        report["exact"] = exact
    report.update(findings.marked_entries(parity))
    return report


def _rows(parity: Parity) -> tuple[list[list[str]], list[list[str]]]:
    """The backend rows and the output rows, as cells."""
    backend_rows = []
    for name, run in parity.backends.items():
        seconds = "" if run.seconds is None else f"{run.seconds:.3f}"
        detail = "reference" if name == parity.reference and run.status == "ok" else run.reason or ""
        backend_rows.append([name, run.status, seconds, detail])
    if parity.exact is not None:
        seconds = "" if parity.exact.seconds is None else f"{parity.exact.seconds:.3f}"
        backend_rows.append([parity.exact.name, parity.exact.status, seconds, findings.routes_said(parity)])
    output_rows = []
    for output, by_backend in parity.outputs.items():
        judged = [c.exact for c in by_backend.values() if c.exact is not None]
        if judged:  # the reference's own distance from the exact value
            distance = figure(judged[0].reference_from_exact)
            output_rows.append([output, parity.reference, "reference", "", "", "", "", "", distance])
        for name, comparison in by_backend.items():
            first = comparison.first_mismatch
            output_rows.append(
                [
                    output,
                    name,
                    findings.verdict(comparison),
                    figure(comparison.max_abs),
                    figure(comparison.max_rel),
                    str(comparison.mismatches),
                    "" if first is None else str(tuple(first)),
                    f"{comparison.atol:g} / {comparison.rtol:g}",
                    findings.from_exact(comparison),
                ]
            )
    return backend_rows, output_rows


OUTPUT_HEADER = [
    "output",
    "backend",
    "verdict",
    "max abs",
    "max rel",
    "mismatches",
    "first mismatch",
    "atol / rtol",
    "from exact",
]


def _in_order(parity: Parity, names: Iterable[str]) -> str:
    """Backend names, in the run's order."""
    named = set(names)
    return ", ".join(name for name in parity.backends if name in named)


def _failed(parity: Parity, not_run: str) -> str:
    """The last line of a run that failed, with every reason."""
    errors = [name for name, run in parity.backends.items() if run.status == "error"]
    marked_errors = [
        name for name, run in (parity.marked_runs or {}).items() if run.status == "error" and name not in errors
    ]
    rejected, marked = parity.rejected(parity.outputs), parity.rejected(parity.marked or {})
    tied = [name for name, values in rejected.items() if all(parity.outputs[v][name].ties for v in values)]
    problems = []
    if errors and parity.reference in errors:
        problems.append(f"the reference {parity.reference} failed")
    if rejected:
        strict = f" (on {', '.join(tied)} only by the order of tied keys: --strict-ties)" if tied else ""
        exactly = any(parity.outputs[v][name].judged_exactly for name, values in rejected.items() for v in values)
        beyond = " and beyond float error" if exactly else ""
        problems.append(f"outputs outside tolerance{beyond} on {_in_order(parity, rejected)}{strict}")
    if marked:
        problems.append(
            f"with every value marked (--all-tensors), values outside tolerance on {_in_order(parity, marked)}"
        )
    if errors:
        problems.append(f"errors on {', '.join(errors)}")
    if marked_errors:
        problems.append(f"errors on {', '.join(marked_errors)} with every value marked")
    return "FAILED: " + "; ".join(problems + ([not_run] if not_run else [])) + "."


def _summary(parity: Parity) -> str:
    """The last line: PASSED only where every backend asked for compared every output, and nothing compared is
    outside tolerance (docs/cli.md, exit codes)."""
    compared, skipped = parity.complete, list(parity.skipped)
    values = "every output and intermediate value" if parity.marked is not None else "every output"
    within = f"{values} of {', '.join(compared)} is within tolerance of the reference {parity.reference}"
    floating = findings.float_error_backends(parity)
    if floating:
        within += (
            f", or within float error of it (no farther from the exact float64 value than float error allows: "
            f"{', '.join(floating)})"
        )
    tied = findings.tied_backends(parity)
    if tied and not parity.strict_ties:
        within += f", or apart only by the order of tied keys (TIED above, on {', '.join(tied)})"
    not_run = f"could not run: {', '.join(skipped)}" if skipped else ""
    if parity.verdict == "passed":
        return f"PASSED: {within}."
    if parity.verdict == "partial":
        return f"PARTIAL: {within}; {not_run} (see above)."
    if parity.verdict == "failed":
        return _failed(parity, not_run)
    problems = []
    if not parity.reference_ran:
        problems.append(f"the reference {parity.reference} could not run")
    named = [name for name in skipped if name in parity.required and name != parity.reference]  # said above
    if named:
        problems.append(f"{', '.join(named)} could not run, though named (--allow-skipped accepts that)")
    if not compared:
        problems.append("no backend besides the reference compared every output")
    return "INCOMPLETE: " + "; ".join(problems) + "."


PREDICTIONS = {
    "directml": "what DirectML was measured to do (`onnx-gather docs semantics`: a gather's reads, section 4.3; a "
    "scatter's writes, section 10)",
    "clamp": "a stand-in, clamped per axis as WebNN does, not what DirectML does",
    "zero": "a stand-in, zeros as OpenVINO's Gather gives, not what DirectML does",
    "error": "an error, as ONNX Runtime's CPU kernels give",
}


def _out_of_bounds(parity: Parity) -> str:
    if not parity.reference_ran:
        return "Out-of-bounds indices: not counted, the reference did not run."
    counts = {node: count for node, count in parity.out_of_bounds.items() if count}
    if not counts:
        return "No out-of-bounds indices met by the reference run."
    mode = parity.out_of_bounds_mode
    listed = findings.shown([f"{node} {count}" for node, count in counts.items()], quoted=False)
    return (
        f"Out-of-bounds index values met by the reference run, per DML node: {listed}. The prediction there is "
        f"out_of_bounds={mode}: {PREDICTIONS[mode]}. ONNX Runtime's CPU kernels refuse such indices and OpenVINO "
        "reads zeros or fails: there, backends legitimately differ."
    )


def _placement(parity: Parity) -> list[str]:
    """Where ONNX Runtime put each node, for the backends that say (real DirectML)."""
    lines = []
    for name, run in parity.backends.items():
        placed = run.outcome.placement if run.outcome is not None else {}
        if not placed:
            continue
        counts = ", ".join(f"{value['nodes']} on {provider}" for provider, value in placed.items())
        lines.append(f"{name}: nodes placed by ONNX Runtime: {counts}.")
        for provider, value in placed.items():
            if provider != "DmlExecutionProvider" and value["names"]:
                lines.append(f"  on {provider}: {findings.shown(value['names'], quoted=False)}")
    return lines


def _random(parity: Parity) -> list[str]:
    """A line on a model that draws random values, if it does: backends cannot agree there."""
    drawing = parity.random_nodes
    if not drawing:
        return []
    listed = findings.shown(drawing, quoted=False)
    draws = "draws" if len(drawing) == 1 else "draw"
    return [
        f"The model is not deterministic: {listed} {draws} new values on every run, so backends can differ "
        "wherever those values reach (output shapes too, where they decide a length). To compare the rest, give "
        "inputs that cancel them (a Piper or VITS voice: --inputs with scales 0, 1, 0), or compare the values "
        "before them with --all-tensors."
    ]


def _versions(parity: Parity) -> str:
    """One line: the versions each backend that could run ran on."""
    parts = [f"onnx-gather {importlib.metadata.version('onnx-gather')}"]
    for name, run in parity.backends.items():
        if run.versions is not None:
            parts.append(f"{name}: " + ", ".join(f"{package} {version}" for package, version in run.versions.items()))
    return f"Versions: {'; '.join(parts)}."


def _table(rows: list[list[str]], header: list[str]) -> list[str]:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    ]


def text(reported: Reported) -> str:
    """The report as a terminal table."""
    parity, words = reported.parity, said(reported)
    lines = [f"{parity.model}  (reference {parity.reference}, {parity.tolerance.describe()})"]
    lines += ["  " + line for line in _table(words.backend_rows, ["backend", "status", "seconds", ""])]
    if words.output_rows:
        lines += [""] + ["  " + line for line in _table(words.output_rows, OUTPUT_HEADER)]
    lines += ["", *words.inputs, *words.random, *words.notes, *words.divergence, words.out_of_bounds, words.summary]
    if words.hint:
        lines.append(words.hint)
    return "\n".join(lines)


_MARKDOWN_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_[]<>|"})  # what our lines could trip over


def _escape(text: str) -> str:
    """``text`` as Markdown shows it verbatim: ``<batch>`` is not an HTML tag, ``E:\\_work`` keeps its backslash."""
    return text.translate(_MARKDOWN_SPECIAL)


def _markdown_table(rows: list[list[str]], header: list[str]) -> list[str]:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(_escape(cell) for cell in cells) + " |"

    return [line(header), "|" + "---|" * len(header), *(line(row) for row in rows)]


@dataclass(frozen=True)
class Said:
    """One model's run as the Markdown and HTML reports word it: the tables' rows, the notes beside them (placement,
    backends' notes, declared shapes, the exact yardstick), the run with every value marked, the out-of-bounds line,
    the verdict, the hint, the inputs, the line on random nodes, the versions."""

    backend_rows: list[list[str]]
    output_rows: list[list[str]]
    notes: list[str]
    divergence: list[str]
    out_of_bounds: str
    summary: str
    hint: str
    inputs: list[str]
    random: list[str]
    versions: str


BACKEND_HEADER = ["backend", "status", "seconds", "reason"]


def said(reported: Reported) -> Said:
    """``reported`` in the words and cells of the reports."""
    parity = reported.parity
    backend_rows, output_rows = _rows(parity)
    return Said(
        backend_rows,
        output_rows,
        [*_placement(parity), *_notes(parity), *findings.declared_lines(parity), *findings.exact_lines(parity)],
        findings.marked_lines(parity),
        _out_of_bounds(parity),
        _summary(parity),
        f"Hint: {reported.hint}." if reported.hint else "",
        inputs_lines(parity.feeds),
        _random(parity),
        _versions(parity),
    )


def markdown(runs: Sequence[Reported], refused: Mapping[Path, str] | None = None) -> str:
    """One or several reports as Markdown; ``refused``: models that could not be loaded, with why."""
    sections = []
    for reported in runs:
        parity, words = reported.parity, said(reported)
        tolerance = parity.tolerance.describe()
        section = [f"## {_escape(str(parity.model))}", "", f"Reference **{parity.reference}**, {tolerance}.", ""]
        section += _markdown_table(words.backend_rows, BACKEND_HEADER)
        if words.output_rows:
            section += ["", *_markdown_table(words.output_rows, OUTPUT_HEADER)]
        section += ["", *map(_escape, words.notes)]
        section += ["", *map(_escape, words.divergence)] if words.divergence else []
        section += ["", _escape(words.out_of_bounds), "", f"**{_escape(words.summary)}**"]
        if words.hint:
            section += ["", _escape(words.hint)]
        random = words.random
        section += ["", *map(_escape, words.inputs), *(["", *map(_escape, random)] if random else [])]
        section += ["", _escape(words.versions)]
        sections.append("\n".join(section))
    for path, reason in (refused or {}).items():
        sections.append(f"## {_escape(str(path))}\n\n**Refused:** {_escape(reason)}")
    total = len(runs) + len(refused or {})
    if total > 1:  # the overall summary the terminal prints too
        sections.insert(0, f"**{passed_line(runs, total)}**")
    return "# Parity\n\n" + "\n\n".join(sections) + "\n"


def passed_line(runs: Sequence[Reported], total: int) -> str:
    """The line on a run of several models: how many passed."""
    return f"{sum(reported.parity.passed for reported in runs)} of {total} models passed."
