"""Windows programs under Wine for real DirectML: one Xvfb and one program (runner.exe or direct.exe) serve a whole
batch of requests.

Every request has a time limit; on a timeout, an error of the program, or ``close()``, the program, the Wine server
it used and Xvfb are ended. Both children also die with this process (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import ctypes
import os
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from onnx_gather.core.errors import UserError
from onnx_gather.directml import leftovers
from onnx_gather.directml.layout import SETUP_COMMAND, WINE, WINESERVER, Layout, wine_environment
from onnx_gather.directml.memory_limit import MemoryLimit
from onnx_gather.directml.memory_limit import default_bytes as memory_limit_bytes

START_SECONDS = 120.0
REQUEST_SECONDS = 600.0


class DirectMlError(RuntimeError):
    """ONNX Runtime with the DirectML provider refused a model or failed a run (its message)."""


class SessionCreationError(DirectMlError):
    """ONNX Runtime with the DirectML provider refused to create a session of the model (its message)."""


class RunnerError(RuntimeError):
    """The runner could not be started, died, or did not answer in time (it and its Wine were ended)."""


def _die_with_parent() -> None:
    """In the child, before exec: be killed when the process that started us ends, however it ends."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def windows_path(path: Path) -> str:
    """Wine maps the Unix root to drive Z:."""
    text = str(path.absolute())
    if "\n" in text or "\r" in text:
        raise UserError(f"{text!r}: a path with a line break cannot be passed to the DirectML runner")
    return "Z:" + text


class WineProgram:
    """One of the set-up's Windows programs (``layout.PROGRAMS``) under Wine, with its own Xvfb and Wine prefix,
    serving requests framed as ``#R info``, ``#R ok`` and ``#R error`` lines. Use as a context manager, or call
    ``close()``.
    """

    def __init__(self, program: str, layout: Layout | None = None, timeout: float = REQUEST_SECONDS) -> None:
        self.layout = layout or Layout.default()
        self.timeout = timeout
        self.program = program
        self.version = ""  # what the program says when it has started: runner.exe, ONNX Runtime's version
        self._lock = threading.RLock()  # workspace() holds it across the requests made inside it
        self._xvfb: subprocess.Popen | None = None
        self._wine: subprocess.Popen | None = None
        self._folder: Path | None = None
        self._buffer = b""
        self._requests = 0
        self._memory: MemoryLimit | None = None
        self.starts = 0  # how many times the program was started: what a session of it belongs to

    def __enter__(self) -> WineProgram:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def running(self) -> bool:
        return self._wine is not None and self._wine.poll() is None

    def start(self) -> None:
        """Start Xvfb and the runner; raise RunnerError (everything ended again) if either fails."""
        if self.running:
            return
        self._end()  # what is left of a runner that died
        problems = self.layout.problems()
        if problems:
            raise RunnerError(f"real DirectML is not set up ({problems[0]}): run `{SETUP_COMMAND}` as root")
        try:
            temporary = Path(tempfile.gettempdir())
            leftovers.remove_dead(temporary)  # what a killed run of onnx-gather left
            self._folder = Path(tempfile.mkdtemp(prefix=leftovers.prefix(), dir=temporary))
            display = self._start_xvfb()
            environment = wine_environment(self._private_prefix(), self._temporary(), DISPLAY=display)
            self._memory = MemoryLimit(self._folder.name, memory_limit_bytes())
            memory = self._memory

            def prepare() -> None:  # in the child, before Wine runs
                _die_with_parent()
                memory.enter()

            with open(self._folder / "wine.log", "wb") as log:
                folder = windows_path(self.layout.programs).replace("/", "\\")
                self._wine = subprocess.Popen(
                    [WINE, str(self.layout.program(self.program)), folder],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    env=environment,
                    start_new_session=True,
                    preexec_fn=prepare,
                )
            self.starts += 1
            self.version = self._reply("start", START_SECONDS)[1]
        except BaseException:  # a failed start, or Ctrl-C: nothing to wait for
            self._end(patience=0.0)
            raise

    def _private_prefix(self) -> Path:
        """A Wine prefix of this runner's own: copies of the set-up prefix's registry, its drive C: shared.

        A Wine server serves one prefix, so each runner gets its own server, which it can end without touching
        another runner's (tests, a command line in a second process).
        """
        assert self._folder is not None
        shared, prefix = self.layout.prefix, self._folder / "prefix"
        (prefix / "dosdevices").mkdir(parents=True)
        for name in (".update-timestamp", "system.reg", "user.reg", "userdef.reg"):
            if (shared / name).is_file():
                shutil.copy2(shared / name, prefix / name)
        (prefix / "drive_c").symlink_to(shared / "drive_c")
        (prefix / "dosdevices" / "c:").symlink_to("../drive_c")
        (prefix / "dosdevices" / "z:").symlink_to("/")
        return prefix

    def _temporary(self) -> Path:
        """The runner's TMPDIR, inside its folder: what Wine leaves there goes with the folder."""
        assert self._folder is not None
        folder = self._folder / "tmp"
        folder.mkdir(exist_ok=True)
        return folder

    def _start_xvfb(self) -> str:
        read_end, write_end = os.pipe()
        try:
            self._xvfb = subprocess.Popen(
                ["Xvfb", "-displayfd", str(write_end), "-screen", "0", "640x480x24", "-nolisten", "tcp"],
                pass_fds=(write_end,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
            os.close(write_end)
            write_end = -1
            number = b""
            deadline = time.monotonic() + START_SECONDS
            while not number.endswith(b"\n"):
                ready, _, _ = select.select([read_end], [], [], max(0.0, deadline - time.monotonic()))
                chunk = os.read(read_end, 64) if ready else b""
                if not chunk:
                    raise RunnerError("Xvfb did not start (no display number within the time limit)")
                number += chunk
            return f":{int(number)}"
        finally:
            os.close(read_end)
            if write_end >= 0:
                os.close(write_end)

    def _reply(self, what: str, seconds: float) -> tuple[list[tuple[str, str]], str]:
        """Read one reply: the ``info`` lines (kind, text) and the ``ok`` text; raise on ``error``, death, timeout."""
        assert self._wine is not None and self._wine.stdout is not None
        infos: list[tuple[str, str]] = []
        deadline = time.monotonic() + seconds
        fd = self._wine.stdout.fileno()
        while True:
            while b"\n" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\n", 1)
                line = raw.decode("utf-8", "replace")
                if not line.startswith("#R "):
                    continue  # Wine's own chatter
                kind, _, text = line[3:].partition(" ")
                if kind == "ok":
                    return infos, text
                if kind == "error":
                    raise DirectMlError(text.strip())
                if kind == "info":
                    sub, _, rest = text.partition(" ")
                    infos.append((sub, rest))
            ready = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]
            chunk = os.read(fd, 1 << 16) if ready else b""
            if not chunk:
                if ready:
                    reason = f"the runner ended unexpectedly ({self._how_it_ended()})"
                    if self._memory is not None and self._memory.exceeded():
                        reason = (
                            f"DirectML under Wine ran out of memory (the runner's limit: {self._memory.describe()})"
                        )
                else:
                    reason = f"no answer within {seconds:g} s"
                detail = self._log_tail()
                self._end(patience=5.0 if ready else 0.0)  # past its time limit, it is not waited for again
                raise RunnerError(f"DirectML {what}: {reason}; Wine and Xvfb were ended{detail}")
            self._buffer += chunk

    def _how_it_ended(self) -> str:
        """The runner's exit status once its output has closed: the signal that ended it, or its exit code."""
        assert self._wine is not None
        try:
            code = self._wine.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            return "it closed its output"
        if code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exit code {code}"

    def _log_tail(self) -> str:
        try:
            lines = (self._folder / "wine.log").read_text(errors="replace").strip().splitlines()  # type: ignore[operator]
        except OSError:
            return ""
        return f" (Wine said: {' | '.join(lines[-3:])})" if lines else ""

    def _request(self, line: str, what: str) -> tuple[list[tuple[str, str]], str]:
        if not self.running:
            self.start()
        assert self._wine is not None and self._wine.stdin is not None
        try:
            self._wine.stdin.write(line.encode() + b"\n")
            self._wine.stdin.flush()
        except OSError as error:
            self._end()
            raise RunnerError(f"DirectML {what}: the runner is gone ({error}); Wine and Xvfb were ended") from error
        try:
            return self._reply(what, self.timeout)
        except KeyboardInterrupt:  # Ctrl-C: the runner is ended at once, not asked to finish its work
            self._end(patience=0.0)
            raise

    def request(self, line: str, what: str) -> tuple[list[tuple[str, str]], str]:
        """Send one request line (the runner started if need be); its ``info`` lines (kind, text) and ``ok`` text.

        ``what`` names the request in errors. Raises DirectMlError on the program's ``error`` reply, RunnerError
        (everything ended) when the program dies or does not answer within the time limit.
        """
        with self._lock:
            return self._request(line, what)

    @contextmanager
    def workspace(self, stem: str) -> Iterator[Path]:
        """A fresh folder for one request's files in the runner's private folder (the runner started if need be),
        removed afterwards; other requests wait until it is."""
        with self._lock:
            if not self.running:
                self.start()
            assert self._folder is not None
            self._requests += 1
            folder = self._folder / f"{stem}{self._requests}"
            folder.mkdir()
            try:
                yield folder
            finally:
                shutil.rmtree(folder, ignore_errors=True)

    @property
    def memory_limit(self) -> str:
        """The runner's memory limit, or why it has none."""
        if self._memory is None or self._memory.folder is None:
            return f"none ({self._memory.unavailable if self._memory else 'not started'})"
        return self._memory.describe()

    def close(self) -> None:
        """Ask the runner to quit, then end whatever is left: the runner, its Wine server, Xvfb."""
        with self._lock:
            if self.running:
                try:
                    self._request("quit", "quit")
                except (RunnerError, DirectMlError):
                    pass  # _end below makes sure
            self._end()

    def _end(self, patience: float = 5.0) -> None:
        if self._wine is not None:
            _stop(self._wine, patience=patience)
            for stream in (self._wine.stdin, self._wine.stdout):
                if stream is not None:
                    stream.close()
            self._wine = None
            # The Wine server and the services it started (winedevice.exe, ...) serve this runner's prefix alone.
            environment = wine_environment(self._folder / "prefix", self._temporary())  # type: ignore[operator]
            subprocess.run([WINESERVER, "-k"], env=environment, capture_output=True, timeout=60, check=False)
        if self._xvfb is not None:
            _stop(self._xvfb, patience=0.0)
            self._xvfb = None
        if self._memory is not None:
            self._memory.remove()
            self._memory = None
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None
        self._buffer = b""


def _stop(process: subprocess.Popen, patience: float) -> None:
    """End a child started in its own session: give it ``patience`` seconds, then end its whole process group."""
    try:
        process.wait(timeout=patience)
    except subprocess.TimeoutExpired:
        pass
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
            if sig == signal.SIGTERM:
                os.killpg(process.pid, signal.SIGCONT)  # a stopped process acts on SIGTERM once it runs again
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            continue
    process.wait()
