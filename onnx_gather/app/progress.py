"""One line of progress on a terminal, rewritten in place: which model of how many, which backend is running
(``Announced`` wraps a backend to say so). Nothing at all when the stream is not a terminal (a log, a pipe, CI)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

import numpy as np
import onnx

from onnx_gather.runtime.backends import Backend, Outcome
from onnx_gather.runtime.model import Model

_WIDTH = 20
_CLEAR = "\r\033[K"  # back to the line's start, and erase it


class Progress:
    """Progress over ``total`` models on ``stream``."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total = total
        self.stream = stream
        self.shown = stream.isatty()
        self.done = 0

    def _write(self, text: str) -> None:
        if self.shown:
            self.stream.write(text)
            self.stream.flush()

    def step(self, what: str) -> None:
        """Show what runs now, with the bar at the models done so far."""
        filled = round(_WIDTH * self.done / self.total) if self.total else _WIDTH
        bar = "#" * filled + "." * (_WIDTH - filled)
        counted = f"{self.done + 1}/{self.total} " if self.total > 1 else ""
        self._write(f"{_CLEAR}[{bar}] {counted}{what}")

    def clear(self) -> None:
        """Erase the line, before other output."""
        self._write(_CLEAR)

    def model_done(self) -> None:
        self.done += 1
        self.clear()

    def finish(self) -> None:
        """With several models, the full bar stays on its own line; else nothing stays."""
        if self.total > 1:
            self._write(f"{_CLEAR}[{'#' * _WIDTH}] {self.done}/{self.total} models\n")


class Announced(Backend):
    """``backend``, showing on ``progress`` when it starts to run ``model_path`` (the runtime knows nothing of
    progress lines)."""

    def __init__(self, backend: Backend, progress: Progress, model_path: Path) -> None:
        vars(self).update(vars(backend))  # its device and out-of-bounds mode
        self.name, self.description = backend.name, backend.description
        self.backend, self.progress, self.model_path = backend, progress, model_path

    def unavailable(self) -> str | None:
        return self.backend.unavailable()

    def refusal(self, model: onnx.ModelProto) -> str | None:
        return self.backend.refusal(model)

    def versions(self) -> dict[str, str]:
        return self.backend.versions()

    def run(self, model: Model, feeds: Mapping[str, np.ndarray]) -> Outcome:
        self.progress.step(f"{self.model_path}: {self.name}")
        return self.backend.run(model, feeds)
