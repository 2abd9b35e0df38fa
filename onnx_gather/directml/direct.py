"""DirectML's gather and scatter operators called directly, without ONNX Runtime: direct.exe under Wine.

ONNX Runtime's DirectML provider decides the descs DirectML sees (padding, strides, buffer sizes). Here the caller
gives every field of the operator desc and of its DML_BUFFER_TENSOR_DESCs, the input buffers byte for byte and, if it
wants, one buffer all tensors share (``Case.memory``); each case comes back as the output's buffer read back whole
(filled with a known byte before the dispatch, so that what the operator did not write shows), or as the stage where
DirectML refused it with its HRESULT.
The process is a ``process.WineProgram`` (Xvfb, a private Wine prefix, a memory limit, time limits, everything ended
on errors, timeouts and Ctrl-C) running direct.exe.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from onnx_gather.core.descs import Case, DescOutcome
from onnx_gather.core.words import counted
from onnx_gather.directml.layout import Layout
from onnx_gather.directml.process import REQUEST_SECONDS, DirectMlError, WineProgram, windows_path

BATCH = 500  # cases per request: a case takes a few milliseconds, a request has REQUEST_SECONDS


class DirectRunner:
    """direct.exe under Wine, serving batches of cases. Use as a context manager, or call ``close()``."""

    def __init__(self, layout: Layout | None = None, timeout: float = REQUEST_SECONDS, batch: int = BATCH) -> None:
        self.runner = WineProgram("direct", layout, timeout)
        self.batch = batch

    def __enter__(self) -> DirectRunner:
        self.runner.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def feature_level(self) -> str:
        """DirectML's highest feature level on this device, e.g. "6.4" (empty before the start)."""
        return self.runner.version

    def run(self, cases: Sequence[Case]) -> list[DescOutcome]:
        """Every case on DirectML, ``batch`` to a request; the outcomes in order."""
        outcomes: list[DescOutcome] = []
        for first in range(0, len(cases), self.batch):
            outcomes += self._run_batch(cases[first : first + self.batch])
        return outcomes

    def _run_batch(self, cases: Sequence[Case]) -> list[DescOutcome]:
        with self.runner.workspace("cases") as folder:
            for k, case in enumerate(cases):
                (folder / str(k)).mkdir()
                (folder / str(k) / "desc.txt").write_text(case.text())
                for role, data in zip(case.roles, case.inputs, strict=False):
                    (folder / str(k) / f"{role}.bin").write_bytes(data)
            what = f"run of {counted(len(cases), 'case')}"
            infos, _ = self.runner.request(f"cases {windows_path(folder)} {len(cases)}", what)
            answers = dict(rest.split(" ", 1) for kind, rest in infos if kind == "case")
            return [_outcome(folder / str(k), answers.get(str(k), ""), case) for k, case in enumerate(cases)]

    def close(self) -> None:
        """Ask direct.exe to quit, then end whatever is left: it, its Wine server, Xvfb."""
        self.runner.close()


def _outcome(folder: Path, answer: str, case: Case) -> DescOutcome:
    if answer.startswith("refused "):
        return DescOutcome(answer.removeprefix("refused "), None)
    if answer != "ok":
        raise DirectMlError(f"direct.exe answered {answer or 'nothing'!r} for the case in {folder.name}")
    output = (folder / "output.bin").read_bytes()
    if len(output) != case.read_back:
        raise DirectMlError(f"direct.exe wrote {len(output)} bytes for an output buffer of {case.read_back}")
    return DescOutcome(None, output)
