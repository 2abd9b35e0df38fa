"""Make the README's picture of `check --html`: the bundled sample's page, opened in headless Chromium
(tools/headless.py), photographed and kept small (a palette of 256 colours) in docs/check-sample.png.

    python tools/screenshot.py [OUT.png]
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
from pathlib import Path

import headless  # beside this file
from PIL import Image

import onnx_gather
from onnx_gather.app import cli

OUT = Path(__file__).resolve().parent.parent / "docs" / "check-sample.png"
WIDTH, HEIGHT = 1200, 1080


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    with tempfile.TemporaryDirectory() as folder:
        page, shot = Path(folder) / "sample.html", Path(folder) / "shot.png"
        sample = Path(onnx_gather.sample_model_path())
        with contextlib.redirect_stdout(io.StringIO()), contextlib.chdir(sample.parent):  # the page names sample.onnx
            cli.main(["check", sample.name, "--html", str(page)])
        with headless.Browser(WIDTH, HEIGHT) as browser:
            browser.open(page)
            browser.evaluate("window.onnxGather.ready")
            browser.screenshot(shot)
            problems = [*browser.seen.exceptions, *browser.seen.console_errors, *browser.seen.errors]
        if problems:
            print(f"the page logged: {problems}", file=sys.stderr)
            return 1
        Image.open(shot).convert("RGB").quantize(256).save(out, optimize=True)
    print(f"wrote {out} ({out.stat().st_size:,} bytes, {WIDTH}x{HEIGHT})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
