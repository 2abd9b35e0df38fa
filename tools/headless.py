"""Headless Chromium (Debian's ``chromium``) driven through its DevTools protocol on a pipe: open a page from disk,
wait for it to say it is drawn, read its DOM, take a screenshot, and keep every console message, uncaught exception,
log entry and request the page made. Used by tests/test_page_browser.py and the tools that time and photograph the
HTML reports (tools/page_timing.py, tools/screenshot.py).

The browser runs with a profile of its own in a temporary folder, every host name resolving to nothing and a proxy
on a closed port of this machine, so that nothing it asked for could leave the machine even if the page tried; the
page's requests are listed all the same, and a test holds them to the page's own file. The process is always ended:
on leaving the ``with``, on a time-out, on an error.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

CANDIDATES = ("chromium", "chromium-browser")  # Debian's package names the program chromium
TIMEOUT = 60.0  # seconds for one command or one wait


class BrowserError(RuntimeError):
    """The browser could not start, answered an error, or did not answer in time."""


def find() -> str | None:
    """The path of a Chromium program here, or None."""
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class Seen:
    """What the page did, as the protocol told it: console messages (type, text), exceptions, log entries of level
    error, and the URL of every request."""

    console: list[tuple[str, str]] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    @property
    def console_errors(self) -> list[str]:
        return [text for kind, text in self.console if kind in ("error", "assert")]


def _descendants(pid: int) -> list[int]:
    """The processes below ``pid``, at any depth (from /proc; none where there is no /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, ahead = [], [pid]
    while ahead:
        for child in children.get(ahead.pop(), []):
            found.append(child)
            ahead.append(child)
    return found


class Browser:
    """One headless Chromium, one page: ``open``, then ``evaluate``, ``screenshot``; ``seen`` holds what it did."""

    def __init__(self, width: int = 1280, height: int = 900, program: str | None = None) -> None:
        self.program = program or find()
        if self.program is None:
            raise BrowserError(f"no Chromium here (looked for {', '.join(CANDIDATES)}): apt-get install chromium")
        self.width, self.height = width, height
        self.seen = Seen()
        self._messages: queue.Queue = queue.Queue()
        self._events: list[dict] = []
        self._next = 0
        self._process: subprocess.Popen | None = None
        self._profile = ""
        self._session = ""

    def __enter__(self) -> Browser:
        self._profile = tempfile.mkdtemp(prefix="onnx-gather-chromium-")
        to_browser, self._writer = os.pipe()
        self._reader, from_browser = os.pipe()

        def pipes() -> None:  # in the child: the protocol reads fd 3 and writes fd 4 (moved up first: no clash)
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser, from_browser)]
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        arguments = [
            self.program,
            "--headless",
            "--remote-debugging-pipe",
            "--no-sandbox",  # root in a container has no user namespace for the sandbox
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--proxy-server=127.0.0.1:9",  # the discard port, closed: a request that got past the resolver fails
            f"--user-data-dir={self._profile}",
            f"--window-size={self.width},{self.height}",
            "about:blank",
        ]
        try:
            self._process = subprocess.Popen(
                arguments,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                close_fds=False,  # the descriptors Python opens are not inherited (PEP 446); fd 3 and 4 are
                preexec_fn=pipes,
                start_new_session=True,  # a process group of its own, ended whole on leaving
            )
        finally:
            os.close(to_browser)
            os.close(from_browser)
        threading.Thread(target=self._read, daemon=True).start()
        try:
            target = self._send("Target.createTarget", {"url": "about:blank"})["targetId"]
            self._session = self._send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Runtime", "Log", "Network", "Page"):
                self.send(f"{domain}.enable")
            self.send(
                "Emulation.setDeviceMetricsOverride",
                {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False},
            )
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *_: object) -> None:
        process = self._process
        helpers = _descendants(process.pid) if process is not None else []
        if process is not None and process.poll() is None:
            try:
                os.write(self._writer, json.dumps({"id": 0, "method": "Browser.close"}).encode() + b"\0")
                process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                process.kill()
                process.wait(timeout=10)
        if process is not None:  # its helpers still there (renderers, the zygote), by their ids, and its own group
            for pid in helpers:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        for descriptor in (self._writer, self._reader):
            try:
                os.close(descriptor)
            except OSError:
                pass
        shutil.rmtree(self._profile, ignore_errors=True)

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._reader, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            buffer += chunk
            while b"\0" in buffer:
                message, buffer = buffer.split(b"\0", 1)
                self._messages.put(json.loads(message))
        self._messages.put(None)

    def _note(self, message: dict) -> None:
        """Keep what an event tells of the page."""
        method, params = message.get("method", ""), message.get("params", {})
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.seen.console.append((params.get("type", ""), text))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.seen.exceptions.append(details.get("exception", {}).get("description") or details.get("text", ""))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            self.seen.errors.append(params["entry"].get("text", ""))
        elif method == "Network.requestWillBeSent":
            self.seen.requests.append(params.get("request", {}).get("url", ""))
        self._events.append(message)

    def _receive(self, deadline: float) -> dict:
        try:
            message = self._messages.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise BrowserError("Chromium did not answer in time") from None
        if message is None:
            raise BrowserError("Chromium closed its end of the protocol (it exited)")
        if "method" in message:
            self._note(message)
        return message

    def _send(self, method: str, params: dict | None = None, session: str = "", timeout: float = TIMEOUT) -> dict:
        self._next += 1
        command = {"id": self._next, "method": method, "params": params or {}}
        if session:
            command["sessionId"] = session
        os.write(self._writer, json.dumps(command).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            message = self._receive(deadline)
            if message.get("id") == self._next:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error'].get('message', message['error'])}")
                return message.get("result", {})

    def send(self, method: str, params: dict | None = None, timeout: float = TIMEOUT) -> dict:
        """A command to the page's session; its result."""
        return self._send(method, params, self._session, timeout)

    def wait_for(self, method: str, timeout: float = TIMEOUT) -> dict:
        """The first event ``method`` of the page from now on (or already received and not yet waited for)."""
        for index, event in enumerate(self._events):
            if event.get("method") == method:
                return self._events.pop(index)
        deadline = time.monotonic() + timeout
        while True:
            message = self._receive(deadline)
            if message.get("method") == method:
                self._events.remove(message)
                return message

    def open(self, path: str | os.PathLike) -> None:
        """Load the file at ``path`` and wait for its load event; ``seen`` then holds what this page does."""
        self._events.clear()
        self.seen = Seen()
        self.send("Page.navigate", {"url": Path(path).resolve().as_uri()})
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str, timeout: float = TIMEOUT) -> object:
        """The value of ``expression`` in the page (a promise awaited), as JSON brings it back."""
        result = self.send(
            "Runtime.evaluate", {"expression": expression, "awaitPromise": True, "returnByValue": True}, timeout
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise BrowserError(details.get("exception", {}).get("description") or details.get("text", "an exception"))
        return result.get("result", {}).get("value")

    def screenshot(self, path: str | os.PathLike) -> Path:
        """A PNG of the page's viewport, written to ``path``."""
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        Path(path).write_bytes(base64.b64decode(data))
        return Path(path)
