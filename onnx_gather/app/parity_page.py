"""``parity --html``: the page of a parity run, a section per model: the verdict, the backends' and the outputs'
tables (``report.said``: the rows the terminal and the Markdown show, each output's distance from the reference
and from the exact value), a histogram of the differences per output and backend (``runtime.comparison.histogram``
of the arrays the backends computed), and with ``--all-tensors`` the picture ``check --html`` draws of the model,
each backend's first nodes whose outputs leave tolerance while their inputs agree marked on it."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import onnx

from onnx_gather.app import pages
from onnx_gather.app.check_page import CAPTION, picture
from onnx_gather.app.check_report import session_of
from onnx_gather.app.findings import figure
from onnx_gather.app.report import BACKEND_HEADER, OUTPUT_HEADER, Reported, passed_line, said
from onnx_gather.graphs.placement.check import check, with_session
from onnx_gather.graphs.plumbing import bodies
from onnx_gather.runtime.comparison import Histogram, histogram, is_float
from onnx_gather.runtime.parity import Parity

_WIDTH, _HEIGHT, _BOTTOM = 320, 110, 22  # a histogram's drawing, and the room for its axis under the bars


def marked_picture(model: onnx.ModelProto, path: Path, parity: Parity) -> list[dict] | None:
    """With ``--all-tensors``: the picture of ``model`` (``check_page.picture``, at the default feature level) with
    each backend's first nodes whose outputs differ while their inputs agree marked (none where none differs); None
    where ONNX Runtime's session of the model is not known."""
    session, _ = session_of(model, str(path))
    if session is None:
        return None
    main = bodies(model)[0].where
    marks: dict[tuple[str, str], list[str]] = {}
    for backend, found in (parity.divergence or {}).items():
        for rank, entry in enumerate(found):
            which = "the first node" if rank == 0 else f"node {rank + 1}"
            text = f"{backend}: {which} outside tolerance, max abs {figure(entry.comparison.max_abs)}"
            marks.setdefault((main, entry.node), []).append(text)
    return picture(with_session(check(model), session), session, marks)


def _bars(found: Histogram, columns: list[float]) -> list[int]:
    """The counts of ``found`` in ``columns`` (equal, each decade from ``columns``' edges, not finite)."""
    by_edge = dict(zip(found.edges, found.counts, strict=False))
    return [found.equal, *(by_edge.get(edge, 0) for edge in columns), found.unfinite]


def chart(title: str, note: str, series: Sequence[tuple[str, str, Histogram]], atol: float) -> str:
    """An SVG histogram: per column (equal, each decade of the difference, not finite) a bar per series (its
    label, its CSS class, its ``Histogram``), heights on a log scale, and where the tolerance's ``atol`` falls."""
    exponents = [round(math.log10(edge)) for _, _, found in series for edge in found.edges[:-1]]
    columns = [10.0**e for e in range(min(exponents), max(exponents) + 1)] if exponents else []
    values = [(label, kind, _bars(found, columns)) for label, kind, found in series]
    highest = max((count for _, _, counts in values for count in counts), default=0)
    slots = len(columns) + 2
    slot = _WIDTH / slots
    bar = (slot - 4) / len(values)
    parts = []
    for index in range(slots):
        left = index * slot + 2
        for number, (label, kind, counts) in enumerate(values):
            count = counts[index]
            height = 0 if not count else max(2.0, (_HEIGHT - _BOTTOM - 4) * math.log1p(count) / math.log1p(highest))
            column = "equal" if index == 0 else "unfinite" if index == slots - 1 else kind
            said = (
                "equal"
                if index == 0
                else "not finite"
                if index == slots - 1
                else f"{columns[index - 1]:g} to {columns[index - 1] * 10:g} apart"
            )
            parts.append(
                f'<rect class="bar {column}" x="{left + number * bar:.1f}" y="{_HEIGHT - _BOTTOM - height:.1f}" '
                f'width="{bar:.1f}" height="{height:.1f}"><title>{pages.escaped(label)}: {count:,} '
                f"{'element' if count == 1 else 'elements'} {pages.escaped(said)}</title></rect>"
            )
    labels = ["=", *(f"1e{round(math.log10(c))}" for c in columns), "inf"]
    step = max(1, math.ceil(len(labels) / 9))
    for index, label in enumerate(labels):
        if index % step == 0 or index == len(labels) - 1:
            x = index * slot + slot / 2
            parts.append(f'<text x="{x:.1f}" y="{_HEIGHT - 8}" text-anchor="middle">{pages.escaped(label)}</text>')
    if columns and atol > 0 and columns[0] <= atol < columns[-1] * 10:
        x = (1 + math.log10(atol / columns[0])) * slot
        parts.append(f'<line class="tolerance" x1="{x:.1f}" x2="{x:.1f}" y1="0" y2="{_HEIGHT - _BOTTOM}"/>')
        parts.append(f'<text x="{x + 2:.1f}" y="9">atol {atol:g}</text>')
    return (
        f'<div class="histogram"><h4>{pages.escaped(title)}</h4><p class="caption">{pages.escaped(note)}</p>'
        f'<svg viewBox="0 0 {_WIDTH} {_HEIGHT}" width="{_WIDTH}" height="{_HEIGHT}">{"".join(parts)}</svg></div>'
    )


def histograms(parity: Parity) -> str:
    """A histogram per output and backend: how far each element is from the reference's (and, for a float output
    the yardstick judged, from the exact value)."""
    computed = {name: run.outcome.outputs for name, run in parity.backends.items() if run.outcome is not None}
    reference = computed.get(parity.reference, {})
    exact = parity.exact.outcome.outputs if parity.exact is not None and parity.exact.outcome is not None else {}
    charts = []
    for output, by_backend in parity.outputs.items():
        for name, comparison in by_backend.items():
            actual = computed.get(name, {}).get(output)
            if actual is None or output not in reference:
                continue
            from_reference = histogram(reference[output], actual)
            if from_reference is None:
                continue
            series = [(f"|{name} - {parity.reference}|", "reference", from_reference)]
            if comparison.exact is not None and output in exact and is_float(actual):
                from_exact = histogram(exact[output], actual)
                if from_exact is not None:
                    series.append((f"|{name} - exact|", "exact", from_exact))
            note = f"max abs {figure(comparison.max_abs)}, {comparison.mismatches:,} outside tolerance"
            charts.append(chart(f"{output} on {name}", note, series, comparison.atol))
    if not charts:
        return ""
    legend = (
        '<div class="legend"><span style="--swatch: var(--pass)">equal</span>'
        f'<span style="--swatch: var(--dml)">apart from the reference {pages.escaped(parity.reference)}</span>'
        '<span style="--swatch: #9aa6b8">apart from the exact value</span>'
        '<span style="--swatch: var(--met)">not finite where the other is, or another non-finite value</span></div>'
    )
    return (
        '<h3>The differences, element by element</h3><p class="caption">Each bar counts the elements whose '
        "difference lies in one decade (heights on a log scale; the first decade also holds every smaller "
        f'difference).</p>{legend}<div class="histograms">{"".join(charts)}</div>'
    )


def _section(reported: Reported, index: int) -> str:
    parity, words, drawn = reported.parity, said(reported), reported.picture
    parts = [
        f"<h2>{pages.escaped(parity.model)}</h2>",
        f'<p class="verdict {pages.escaped(parity.verdict)}">{pages.escaped(words.summary)}</p>',
        f"<p>Reference <b>{pages.escaped(parity.reference)}</b>, {pages.escaped(parity.tolerance.describe())}.</p>",
        "<h3>Backends</h3>",
        pages.html_table(BACKEND_HEADER, words.backend_rows),
    ]
    if words.output_rows:
        parts += ["<h3>Outputs</h3>", pages.html_table(OUTPUT_HEADER, words.output_rows)]
    parts.append(histograms(parity))
    if words.divergence:
        parts += ["<h3>Every value marked (--all-tensors)</h3>", pages.lines(words.divergence)]
    if drawn is not None:
        caption = f"{CAPTION} A purple outline marks each backend's first nodes whose outputs leave tolerance."
        parts.append(pages.drawing(f"picture-data-{index}", {"graphs": drawn}, caption))
    notes = [*words.notes, words.out_of_bounds, *([words.hint] if words.hint else []), *words.inputs, *words.random]
    parts += ["<h3>Notes</h3>", pages.lines([*notes, words.versions])]
    return f'<section class="model">{"".join(parts)}</section>'


def parity_page(runs: Sequence[Reported], refused: Mapping[Path, str]) -> str:
    """The page of ``parity --html``: a section per model run (with its ``marked_picture``, where it has one), and
    the models refused with why."""
    total = len(runs) + len(refused)
    sections = [_section(reported, index) for index, reported in enumerate(runs)]
    sections += [
        f'<section class="model"><h2>{pages.escaped(path)}</h2>'
        f'<p class="verdict failed">Refused: {pages.escaped(reason)}</p></section>'
        for path, reason in refused.items()
    ]
    title = str(runs[0].parity.model) if total == 1 and runs else f"{total} models"
    overall = f'<p class="sub">{pages.escaped(passed_line(runs, total))}</p>' if total > 1 else ""
    body = f"<header><h1>onnx-gather parity: {pages.escaped(title)}</h1>{overall}</header>{''.join(sections)}"
    return pages.page(f"onnx-gather parity: {title}", body)
