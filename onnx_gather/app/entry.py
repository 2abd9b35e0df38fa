"""The ``onnx-gather`` console entry point: Ctrl-C is one line and exit 130 from the first moment our code runs, also
while ``cli`` imports numpy, onnx and the runtimes (a quarter of a second), before ``cli.main`` takes it over.

During the imports a Ctrl-C ends the process at once: a KeyboardInterrupt raised inside an extension module's
initialization becomes an ImportError (onnxruntime) or aborts the process (pybind11), and nothing has been started
or written yet that would need ending. What comes before this module is Python's own startup (site, a venv's path
hooks: some 25 ms), which no code of ours reaches.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

INTERRUPTED = "onnx-gather: interrupted"


def _exit_interrupted(signum: int, frame: FrameType | None) -> None:
    os.write(sys.stderr.fileno(), f"{INTERRUPTED}\n".encode())
    os._exit(130)


def main() -> int:
    """Import the command line and run it; exit code 130 with one line if interrupted on the way."""
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.default_int_handler:  # not where Ctrl-C is ignored (nohup, a background job)
        signal.signal(signal.SIGINT, _exit_interrupted)
    try:
        from onnx_gather.app import cli  # the heavy imports: numpy, onnx, the layers
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        return cli.main()
    except KeyboardInterrupt:  # cli.main answers its own interrupts; this one came just before or after it
        print(INTERRUPTED, file=sys.stderr)
        return 130
