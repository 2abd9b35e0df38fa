"""A parity report as people read it: a table for the terminal, or Markdown."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from onnx_gather.runtime.inputs import dims_text
from onnx_gather.runtime.parity import Parity


def _verdict(comparison: dict, note: str) -> str:
    if note:
        return "DIFFERENT: " + note
    if comparison["equal"]:
        return "bit-identical"
    return "within tolerance" if comparison["within_tolerance"] else "DIFFERENT"


def _number(value: float | None) -> str:
    if value is None:  # a STRING or BOOL output: compared for equality only
        return ""
    return "0" if value == 0 else f"{value:.3g}"


def _rows(parity: Parity) -> tuple[list[list[str]], list[list[str]]]:
    """The backend rows and the output rows, as cells."""
    report = parity.report
    backend_rows = []
    for name, status in report["backends"].items():
        seconds = "" if status["seconds"] is None else f"{status['seconds']:.3f}"
        detail = "reference" if name == report["reference"] and status["status"] == "ok" else status["reason"] or ""
        backend_rows.append([name, status["status"], seconds, detail])
    output_rows = []
    for output, by_backend in report["outputs"].items():
        for name, comparison in by_backend.items():
            first = comparison["first_mismatch"]
            output_rows.append([
                output, name, _verdict(comparison, parity.notes.get((output, name), "")),
                _number(comparison["max_abs"]), _number(comparison["max_rel"]), str(comparison["mismatches"]),
                "" if first is None else str(tuple(first)),
            ])  # fmt: skip
    return backend_rows, output_rows


def _summary(parity: Parity) -> str:
    report = parity.report
    failed_outputs = sorted(
        {
            name
            for by_backend in report["outputs"].values()
            for name, c in by_backend.items()
            if not c["within_tolerance"]
        }
    )
    errors = [name for name, status in report["backends"].items() if status["status"] == "error"]
    if report["passed"]:
        return "PASSED: every output of every backend that ran is within tolerance of the reference."
    problems = []
    if report["backends"].get(report["reference"], {}).get("status") != "ok":
        problems.append(f"the reference {report['reference']} did not run")
    if failed_outputs:
        problems.append(f"outputs outside tolerance on {', '.join(failed_outputs)}")
    if errors:
        problems.append(f"errors on {', '.join(errors)}")
    return "FAILED: " + "; ".join(problems) + "."


PREDICTIONS = {
    "directml": "DirectML's measured reading (`onnx-gather docs semantics`, section 4.3)",
    "clamp": "a stand-in, clamped per axis as WebNN does, not what DirectML reads",
    "zero": "a stand-in, zeros as OpenVINO's Gather gives, not what DirectML reads",
    "error": "an error, as ONNX Runtime's CPU kernels give",
}


def _out_of_bounds(parity: Parity) -> str:
    if parity.report["backends"].get(parity.report["reference"], {}).get("status") != "ok":
        return "Out-of-bounds indices: not counted, the reference did not run."
    counts = {node: count for node, count in parity.report["out_of_bounds"].items() if count}
    if not counts:
        return "No out-of-bounds indices met by the reference run."
    mode = parity.report["out_of_bounds_mode"]
    listed = ", ".join(f"{node} {count}" for node, count in counts.items())
    return (
        f"Out-of-bounds index values met by the reference run, per DML node: {listed}. The prediction there is "
        f"out_of_bounds={mode}: {PREDICTIONS[mode]}. ONNX Runtime's CPU kernels refuse such indices and OpenVINO "
        "reads zeros or fails: there, backends legitimately differ."
    )


def _placement(parity: Parity) -> list[str]:
    """Where ONNX Runtime put each node, for the backends that say (real DirectML)."""
    lines = []
    for name, status in parity.report["backends"].items():
        placed = status.get("placement")
        if not placed:
            continue
        counts = ", ".join(f"{value['nodes']} on {provider}" for provider, value in placed.items())
        lines.append(f"{name}: nodes placed by ONNX Runtime: {counts}.")
        for provider, value in placed.items():
            if provider != "DmlExecutionProvider" and value["names"]:
                lines.append(f"  on {provider}: {', '.join(value['names'])}")
    return lines


def _divergence(parity: Parity) -> list[str]:
    """With --all-tensors: per backend, the first nodes whose outputs differ while their inputs agree."""
    report = parity.report
    if "divergence" not in report:
        return []
    lines = [f"All tensors: {report['all_tensors']['compared']} intermediate values compared too ("
             f"{report['all_tensors']['note']})."]  # fmt: skip
    for backend, found in report["divergence"].items():
        if not found:
            lines.append(f"{backend}: no node's outputs differ beyond tolerance while its inputs agree.")
            continue
        lines.append(f"{backend}: first nodes whose outputs differ while their inputs agree, in topological order:")
        for entry in found:
            where = f", on {entry['placement']}" if "placement" in entry else ""
            figures = f"max abs {_number(entry['max_abs'])}, max rel {_number(entry['max_rel'])}"
            lines.append(f"  node {entry['node']!r} ({entry['op_type']}{where}): output {entry['output']!r}, "
                         f"{figures}, {entry['mismatches']} mismatches")  # fmt: skip
    return lines


def _random(report: dict) -> list[str]:
    """A line on a model that draws random values, if it does: backends cannot agree there."""
    drawing = report.get("random_nodes", [])
    if not drawing:
        return []
    listed = ", ".join(drawing[:5]) + (f" and {len(drawing) - 5} more" if len(drawing) > 5 else "")
    draws = "draws" if len(drawing) == 1 else "draw"
    return [f"The model is not deterministic: {listed} {draws} new values on every run, so backends can differ "
            "wherever those values reach (output shapes too, where they decide a length). To compare the rest, give "
            "inputs that cancel them (a Piper or VITS voice: --inputs with scales 0, 1, 0), or compare the values "
            "before them with --all-tensors."]  # fmt: skip


def _inputs(report: dict) -> str:
    """One line: the inputs the backends ran on, and where they came from."""
    listed = ", ".join(f"{name} {entry['dtype']} {dims_text(entry['shape'])} ({entry['source']})"
                       for name, entry in report["inputs"].items())  # fmt: skip
    seed = f", with --seed {report['seed']}" if report["seed"] is not None else ""
    return f"Inputs: {listed or 'none'}{seed}."


def _versions(report: dict) -> str:
    """One line: the versions each backend that could run ran on."""
    parts = [f"onnx-gather {report['onnx_gather']}"]
    for name, status in report["backends"].items():
        if "versions" in status:
            parts.append(
                f"{name}: " + ", ".join(f"{package} {version}" for package, version in status["versions"].items())
            )
    return f"Versions: {'; '.join(parts)}."


def _table(rows: list[list[str]], header: list[str]) -> list[str]:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in (header, *rows)]  # fmt: skip


def text(parity: Parity) -> str:
    """The report as a terminal table."""
    report = parity.report
    backend_rows, output_rows = _rows(parity)
    lines = [f"{report['model']}  (reference {report['reference']}, atol {report['atol']:g}, rtol {report['rtol']:g})"]
    lines += ["  " + line for line in _table(backend_rows, ["backend", "status", "seconds", ""])]
    if output_rows:
        header = ["output", "backend", "verdict", "max abs", "max rel", "mismatches", "first mismatch"]
        lines += [""] + ["  " + line for line in _table(output_rows, header)]
    lines += [
        "",
        _inputs(report),
        *_random(report),
        *_placement(parity),
        *_divergence(parity),
        _out_of_bounds(parity),
        _summary(parity),
    ]
    if "hint" in report:
        lines.append(f"Hint: {report['hint']}.")
    return "\n".join(lines)


_MARKDOWN_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_[]<>|"})  # what our lines could trip over


def _escape(text: str) -> str:
    """``text`` as Markdown shows it verbatim: ``<batch>`` is not an HTML tag, ``E:\\_work`` keeps its backslash."""
    return text.translate(_MARKDOWN_SPECIAL)


def _markdown_table(rows: list[list[str]], header: list[str]) -> list[str]:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(_escape(cell) for cell in cells) + " |"

    return [line(header), "|" + "---|" * len(header), *(line(row) for row in rows)]


def markdown(runs: list[Parity], refused: Mapping[Path, str] | None = None) -> str:
    """One or several reports as Markdown; ``refused``: models that could not be loaded, with why."""
    sections = []
    for parity in runs:
        report = parity.report
        backend_rows, output_rows = _rows(parity)
        tolerances = f"atol {report['atol']:g}, rtol {report['rtol']:g}"
        section = [f"## {_escape(report['model'])}", "", f"Reference **{report['reference']}**, {tolerances}.", ""]
        section += _markdown_table(backend_rows, ["backend", "status", "seconds", "reason"])
        if output_rows:
            header = ["output", "backend", "verdict", "max abs", "max rel", "mismatches", "first mismatch"]
            section += ["", *_markdown_table(output_rows, header)]
        divergence = _divergence(parity)
        section += ["", *map(_escape, _placement(parity)), *(["", *map(_escape, divergence)] if divergence else [])]
        section += ["", _escape(_out_of_bounds(parity)), "", f"**{_escape(_summary(parity))}**"]
        if "hint" in report:
            section += ["", _escape(f"Hint: {report['hint']}.")]
        section += [
            "",
            _escape(_inputs(report)),
            *(["", *map(_escape, _random(report))] if "random_nodes" in report else []),
        ]
        section += ["", _escape(_versions(report))]
        sections.append("\n".join(section))
    for path, reason in (refused or {}).items():
        sections.append(f"## {_escape(str(path))}\n\n**Refused:** {_escape(reason)}")
    total = len(runs) + len(refused or {})
    if total > 1:  # the overall summary the terminal prints too
        passed = sum(run.report["passed"] for run in runs)
        sections.insert(0, f"**{passed} of {total} models passed.**")
    return "# Parity\n\n" + "\n\n".join(sections) + "\n"
