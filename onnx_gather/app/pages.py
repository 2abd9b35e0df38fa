"""The frame of the HTML reports (``check --html``, ``parity --html``): one self-contained page, its style, its
scripts and its data inside it (the files of ``app/html``, their sources in its README), a policy that lets it
fetch nothing, and the pieces the two pages share: escaped text, tables, figures, the picture's place."""

from __future__ import annotations

import html
import importlib.metadata
import json
from collections.abc import Iterable, Sequence
from importlib import resources

# The page may run its own inline scripts and styles, start a worker from a blob of its own text and show data:
# images; it may fetch nothing, from anywhere.
POLICY = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; worker-src blob:; img-src data:; "
    "connect-src 'none'; form-action 'none'; base-uri 'none'"
)
LAYOUT = "dagre 3.1.3"  # app/html/README.md says where it came from


def asset(name: str) -> str:
    """The text of a file of ``app/html``."""
    return (resources.files("onnx_gather.app") / "html" / name).read_text(encoding="utf-8")


def _layout_library() -> str:
    """dagre, without the source map comment of its last line (so that nothing asks for the map)."""
    lines = asset("dagre.min.js").rstrip("\n").splitlines()
    return "\n".join(line for line in lines if not line.startswith("//# sourceMappingURL="))


def escaped(value: object) -> str:
    """``value`` as page text: escaped."""
    return html.escape(str(value), quote=True)


def data_script(identifier: str, data: object) -> str:
    """``data`` as JSON in a script element the page's scripts read (every ``<`` written ``\\u003c``, so that no
    text of it can close the element or open a comment in it)."""
    payload = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")
    return f'<script type="application/json" id="{escaped(identifier)}">{payload}</script>'


def html_table(header: Sequence[str], rows: Iterable[Sequence[object]], identifier: str = "") -> str:
    """A table of text cells, sorted by a column at a click on its head (``page.js``), in a box of its own that
    scrolls (a long name widens the table, not the page)."""
    attributes = (f' id="{escaped(identifier)}"' if identifier else "") + ' class="sortable"'
    head = "".join(f"<th>{escaped(cell)}</th>" for cell in header)
    body = "".join("<tr>" + "".join(f"<td>{escaped(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    return f'<div class="scroll"><table{attributes}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def card(label: str, value: object, detail: Iterable[str] = (), kind: str = "") -> str:
    """One of the summary's figures: a label, the number, the lines that break it down."""
    lines = "".join(f"<li>{escaped(line)}</li>" for line in detail)
    return (
        f'<div class="figure {escaped(kind)}"><div class="label">{escaped(label)}</div>'
        f'<div class="value">{escaped(value)}</div>{f"<ul>{lines}</ul>" if lines else ""}</div>'
    )


def lines(said: Iterable[str], kind: str = "lines") -> str:
    """Lines of a text report, as a list."""
    items = "".join(f"<li>{escaped(line)}</li>" for line in said)
    return f'<ul class="{escaped(kind)}">{items}</ul>' if items else ""


def drawing(identifier: str, data: object, caption: str) -> str:
    """The place of a picture of the model (``picture.js`` draws it from ``data``): its tools, the drawing, the
    details of what was clicked."""
    return (
        f'<div class="picture" data-source="{escaped(identifier)}">'
        '<div class="tools"><select class="graph" aria-label="graph"></select>'
        '<input class="search" type="search" placeholder="search a node by name or op type (Enter: next)" '
        'aria-label="search">'
        '<span class="found"></span><button class="fit" type="button">fit</button>'
        '<button class="in" type="button" aria-label="zoom in">+</button>'
        '<button class="out" type="button" aria-label="zoom out">&#8722;</button>'
        '<button class="collapse" type="button">collapse all</button><span class="status"></span></div>'
        f'<p class="caption">{escaped(caption)}</p>'
        '<div class="canvas"><svg></svg><aside class="details"></aside></div>'
        f"{data_script(identifier, data)}</div>"
    )


def page(title: str, body: str) -> str:
    """The whole page: ``body`` with the style, the layout library and the scripts, fetching nothing."""
    version = importlib.metadata.version("onnx-gather")
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escaped(title)}</title><style>{asset('page.css')}</style></head>"
        f"<body>{body}"
        f"<footer>Written by onnx-gather {escaped(version)}; the picture laid out by {LAYOUT} (MIT licence). This page "
        "is whole: it fetches nothing.</footer>"
        f'<script id="layout-library">{_layout_library()}</script>'
        f"<script>{asset('picture.js')}</script><script>{asset('page.js')}</script>"
        "</body></html>\n"
    )
