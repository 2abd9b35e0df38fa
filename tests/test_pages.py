"""The HTML reports as files (``check --html``, ``parity --html``): whole, naming nothing outside themselves, holding
the figures and rows of the text and JSON reports; the picture's data; the differences' histogram. How they open in
a browser: tests/test_page_browser.py."""

from __future__ import annotations

import hashlib
import html
import json
import re
import tomllib
from pathlib import Path

import numpy as np
import onnx
from test_session import _island

from onnx_gather.app import cli, pages
from onnx_gather.app.check_page import picture
from onnx_gather.app.findings import figure
from onnx_gather.graphs.placement.check import check, with_session
from onnx_gather.graphs.placement.session import session
from onnx_gather.runtime.comparison import histogram
from onnx_gather.runtime.session_graph import optimized

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
ASSETS = ROOT / "onnx_gather" / "app" / "html"


def _check_page(tmp_path: Path, capsys, model: Path) -> tuple[str, dict]:
    """``check MODEL --html`` and ``check MODEL --json``: the page and the JSON report."""
    page = tmp_path / "check.html"
    cli.main(["check", str(model), "--html", str(page)])
    capsys.readouterr()
    cli.main(["check", str(model), "--json", "--all-nodes"])
    return page.read_text(), json.loads(capsys.readouterr().out)


def _data(page: str, identifier: str) -> dict:
    found = re.search(rf'<script type="application/json" id="{identifier}">(.*?)</script>', page, re.S)
    assert found, identifier
    return json.loads(found.group(1))


def addresses(page: str) -> list[str]:
    """What in ``page`` could make a browser fetch something: an address with a scheme or a network path, a
    ``src``/``href`` attribute, a ``<link>``, an ``@import``, a CSS ``url()`` that is not a fragment of the page."""
    found = re.findall(r"\b(?:https?|ftp|wss?):", page) + re.findall(r"""["'(=]\s*//[^/\s]""", page)
    found += re.findall(r"<(?:link|iframe|embed|object|img|audio|video|source)\b", page, re.I)
    found += re.findall(r"\s(?:src|href|srcset|action|poster)\s*=", page, re.I)
    found += re.findall(r"@import", page) + re.findall(r"url\((?!#)", page)
    return found


def test_the_check_page_holds_the_text_reports_figures_and_a_row_for_every_node(tmp_path, capsys):
    page, report = _check_page(tmp_path, capsys, MODELS / "pow_chain.onnx")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    for line in report["summary"]:
        assert html.escape(line) in page, line
    rows = page.split('id="nodes-table"', 1)[1].split("</table>", 1)[0].count("<tr>") - 1  # the head's row
    assert rows == len(report["nodes"]) == 41
    for value in ("41", "1"):  # nodes, partitions
        assert f'<div class="value">{value}</div>' in page
    drawn = _data(page, "picture-data")["graphs"]
    assert [node["name"] for node in drawn[0]["nodes"]] == [node["name"] for node in report["session"]["nodes"]]
    flagged = {node["name"]: (node["possible"], node["flags"]) for node in drawn[0]["nodes"] if "flags" in node}
    assert flagged == {"power": (1, ["differs pow-zero-zero (possible)"])}
    assert drawn[0]["boxes"] == {
        "0": {
            "title": "DirectML partition 1 of 1",
            "size": 41,
            "ops": "Add 40, Pow 1",
            "dml": True,
            "possible": 1,
        }
    }


def test_a_page_names_nothing_outside_itself_and_its_policy_lets_it_fetch_nothing(tmp_path, capsys):
    page, _ = _check_page(tmp_path, capsys, MODELS / "sample.onnx")
    assert addresses(page) == []
    assert addresses('<img src="x"><a href="https://example.org">') != []  # the test sees what it looks for
    assert f'content="{pages.POLICY}"' in page and "default-src 'none'" in pages.POLICY
    assert "connect-src 'none'" in pages.POLICY and "sourceMappingURL" not in page
    # The data cannot close its script element, nor the text open a tag; no file put inside an element closes it
    assert pages.data_script("d", {"x": "</script><!--<b>"}).count("<") == 2  # its own two tags
    assert json.loads(pages.data_script("d", {"x": "<!--"}).split(">", 1)[1].rsplit("<", 1)[0]) == {"x": "<!--"}
    for name in ("dagre.min.js", "picture.js", "page.js", "page.css"):
        assert not re.search(r"</(script|style)|<!--", pages.asset(name), re.I), name
    assert pages.escaped("<b>'") == "&lt;b&gt;&#x27;"


def test_the_vendored_layout_library_is_the_one_its_readme_names_with_its_licence():
    readme = (ASSETS / "README.md").read_text()
    digest = hashlib.sha256((ASSETS / "dagre.min.js").read_bytes()).hexdigest()
    assert f"SHA-256\n  `{digest}`" in readme or f"`{digest}`" in readme
    name, version = pages.LAYOUT.split()
    assert f"{name}]" in readme and f"@dagrejs/dagre` {version}" in readme
    assert f"={version!r}".replace("'", '"') in (ASSETS / "dagre.min.js").read_text()  # its own version string
    assert "Permission is hereby granted" in (ASSETS / "LICENSE.dagre.txt").read_text()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert data["onnx_gather.app"] == ["html/*"]


def test_the_picture_boxes_each_partition_and_run_of_cpu_nodes_and_marks_the_copies():
    """Sin (no DirectML kernel for DOUBLE) between two partitions: three boxes, and the two links through it copied."""
    model = _island()
    ran = session(model, optimized(model))
    (graph,) = picture(with_session(check(model), ran), ran, {("graph 'g'", "neg"): ["marked"]})
    box = {node["name"]: node["box"] for node in graph["nodes"]}
    assert {box[n] for n in ("r1", "neg", "c1")} != {box[n] for n in ("c2", "r2", "add")}
    assert len({box[n] for n in ("r1", "neg", "c1")}) == 1 and len({box[n] for n in ("c2", "r2", "add")}) == 1
    assert graph["boxes"][str(box["sin"])]["dml"] is False and graph["boxes"][str(box["sin"])]["size"] == 1
    assert graph["boxes"][str(box["sin"])]["causes"] == "1 without a DirectML kernel"
    names = [node["name"] for node in graph["nodes"]]
    copies = {(names[a], names[b]): copy for a, b, copy in graph["links"] if copy}
    assert copies == {("c1", "sin"): "MemcpyToHost", ("sin", "c2"): "MemcpyFromHost"}
    assert [node.get("marks") for node in graph["nodes"] if node["name"] == "neg"] == [["marked"]]
    assert graph["boxes"][str(box["neg"])]["marks"] == 1


def test_the_histogram_counts_elements_by_decade_of_their_difference():
    reference = np.array([1, 2, 3, np.nan, np.inf, 5, 7], np.float32)
    actual = np.array([1, 2.001, 3.5, np.nan, 1, 5, 7.25], np.float32)
    found = histogram(reference, actual)
    assert found.equal == 3 and found.unfinite == 1  # 1, NaN meeting NaN, 5; inf against 1
    assert found.edges == (1e-4, 1e-3, 1e-2, 1e-1, 1.0) and found.counts == (1, 0, 0, 2)
    assert sum(found.counts) + found.equal + found.unfinite == reference.size
    wide = histogram(np.zeros(3), np.array([0, 1e-30, 1e3]))  # 16 decades at most: the smallest fall into the first
    assert len(wide.counts) == 16 and wide.counts[0] == 1 and wide.counts[-1] == 1 and wide.edges[-1] == 1e4
    assert histogram(np.array([True]), np.array([True])) is None
    assert histogram(np.zeros(2), np.zeros(3)) is None


def test_the_parity_page_holds_the_verdict_the_tables_a_histogram_per_output_and_the_first_divergence(tmp_path, capsys):
    """pow_chain's Pow(0, 0), which dmlsim computes as DirectML does: the output differs, and the picture marks
    'power' as dmlsim's first node outside tolerance."""
    page_path, report_path = tmp_path / "parity.html", tmp_path / "parity.json"
    arguments = ["parity", str(MODELS / "pow_chain.onnx"), "--inputs", str(MODELS / "pow_chain.npz")]
    arguments += ["--backends", "pyop,cpu,dmlsim", "--all-tensors", "--html", str(page_path)]
    assert cli.main([*arguments, "--report", str(report_path)]) == 1
    printed = capsys.readouterr().out
    page, report = page_path.read_text(), json.loads(report_path.read_text())
    assert addresses(page) == []
    assert html.escape(printed.strip().splitlines()[-1]) in page  # the verdict line
    for backend, entry in report["outputs"]["a39"].items():
        assert f"<td>a39</td><td>{backend}</td>" in page
        assert f"a39 on {backend}" in page  # its histogram
        assert f"max abs {figure(entry['max_abs'])}, {entry['mismatches']:,} outside tolerance" in page
    assert page.count('<div class="histogram">') == 2
    (graph,) = _data(page, "picture-data-0")["graphs"]
    marked = {node["name"]: node["marks"] for node in graph["nodes"] if "marks" in node}
    assert list(marked) == ["power"] and marked["power"][0].startswith("dmlsim: the first node outside tolerance")


def test_the_html_path_is_checked_before_any_work(tmp_path, capsys):
    model = tmp_path / "model.onnx"
    onnx.save(onnx.load(MODELS / "sample.onnx"), model)
    assert cli.main(["check", str(model), "--html", str(model)]) == 2
    assert "--html" in capsys.readouterr().err
    assert cli.main(["check", str(model), "--html", str(tmp_path / "missing" / "page.html")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_model_whose_session_is_not_known_gets_its_page_without_a_picture(tmp_path, capsys):
    converted = tmp_path / "sample.dml.onnx"
    assert cli.main(["convert", str(MODELS / "sample.onnx"), "-o", str(converted)]) == 0
    page, report = _check_page(tmp_path, capsys, converted)
    assert report["session"] is None and "No picture" in page and 'id="picture-data"' not in page
    assert html.escape(report["summary"][1]) in page  # the line saying why
    assert addresses(page) == []


def test_the_parity_page_of_a_folder_has_a_section_per_model_and_the_models_refused(tmp_path, capsys):
    folder = tmp_path / "models"
    folder.mkdir()
    for name in ("sample.onnx", "pow_chain.onnx"):
        (folder / name).write_bytes((MODELS / name).read_bytes())
    (folder / "broken.onnx").write_bytes(b"not a model")
    page = tmp_path / "parity.html"
    cli.main(["parity", str(folder), "--backends", "pyop,cpu", "--html", str(page)])
    text = page.read_text()
    (passed,) = [line for line in capsys.readouterr().out.splitlines() if line.endswith(" of 3 models passed.")]
    assert passed in text
    assert text.count('<section class="model">') == 3 and "Refused: " in text
    assert text.count("<h2>") == 3 and f"<h2>{html.escape(str(folder / 'broken.onnx'))}</h2>" in text


def test_with_all_tensors_and_nothing_apart_the_parity_page_draws_the_model_unmarked(tmp_path, capsys):
    page = tmp_path / "parity.html"
    arguments = ["parity", str(MODELS / "sample.onnx"), "--backends", "pyop,cpu", "--shape", "token_ids:4x6"]
    assert cli.main([*arguments, "--int-range", "0:32", "--all-tensors", "--html", str(page)]) == 0
    (graph,) = _data(page.read_text(), "picture-data-0")["graphs"]
    assert len(graph["nodes"]) == 6 and not any("marks" in node for node in graph["nodes"])
    assert html.escape("cpu: no node's outputs differ beyond tolerance") in page.read_text()
