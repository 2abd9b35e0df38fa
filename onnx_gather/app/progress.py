"""One line of progress on a terminal, rewritten in place: which model of how many, which backend is running.
Nothing at all when the stream is not a terminal (a log, a pipe, CI)."""

from __future__ import annotations

from typing import TextIO

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
