"""A memory limit for the DirectML runner: a memory cgroup of its own, so that whatever a model does under Wine
(on Wine's own Direct3D 12 each descriptor heap costs 1.5 GB of zeroed memory over lavapipe), the kernel ends the
runner, not the machine's other processes, and the error can say so."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from onnx_gather.core.errors import UserError

VARIABLE = "ONNX_GATHER_DIRECTML_MEMORY_GB"
_V2 = Path("/sys/fs/cgroup")
_V1 = Path("/sys/fs/cgroup/memory")


def _total_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise OSError("no MemTotal in /proc/meminfo")


def default_bytes() -> int:
    """``$ONNX_GATHER_DIRECTML_MEMORY_GB``, else three quarters of the machine's memory."""
    given = os.environ.get(VARIABLE)
    if given:
        try:
            value = float(given)
        except ValueError:
            raise UserError(f"${VARIABLE}={given!r}: expected a number of gigabytes") from None
        if value <= 0:
            raise UserError(f"${VARIABLE}={given!r}: expected a positive number of gigabytes")
        return int(value * 2**30)
    return _total_bytes() * 3 // 4


def _v2() -> bool:
    controllers = _V2 / "cgroup.controllers"
    return controllers.is_file() and "memory" in controllers.read_text().split()


def groups() -> list[Path]:
    """The memory cgroups at the root where ``MemoryLimit`` makes its own (v2, else v1)."""
    try:
        return [entry for entry in (_V2 if _v2() else _V1).iterdir() if entry.is_dir()]
    except OSError:
        return []


def remove_group(folder: Path, patience: float) -> None:
    """Remove a memory cgroup, once the processes left in it have ended (a cgroup with processes cannot be removed,
    and one without is not removed by itself); what is still there after ``patience`` seconds is killed."""
    deadline = time.monotonic() + patience
    while True:
        try:
            pids = [int(pid) for pid in (folder / "cgroup.procs").read_text().split()]
        except OSError:
            pids = []
        if not pids:
            break
        if time.monotonic() > deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    with contextlib.suppress(OSError):
        folder.rmdir()


class MemoryLimit:
    """A memory cgroup (v2, else v1) limited to ``limit`` bytes; ``unavailable`` says why there is none."""

    def __init__(self, name: str, limit: int) -> None:
        self.limit = limit
        self.unavailable = ""
        self.folder: Path | None = None
        v2 = _v2()
        root, limit_file = (_V2, "memory.max") if v2 else (_V1, "memory.limit_in_bytes")
        try:
            folder = root / name
            folder.mkdir()
        except OSError as error:
            self.unavailable = f"no memory cgroup could be made in {root} ({error.strerror or error})"
            return
        self.folder, self._v2 = folder, v2
        try:
            (folder / limit_file).write_text(str(limit))
        except OSError as error:
            self.remove()
            self.unavailable = f"the memory limit could not be set in {folder} ({error.strerror or error})"

    def enter(self) -> None:
        """Put the calling process (and so what it starts) in the cgroup; in a child, before it runs Wine."""
        if self.folder is not None:
            (self.folder / "cgroup.procs").write_text(str(os.getpid()))

    def exceeded(self) -> bool:
        """Whether the kernel had to end a process of the cgroup for memory."""
        if self.folder is None:
            return False
        try:
            events = (self.folder / ("memory.events" if self._v2 else "memory.oom_control")).read_text()
        except OSError:
            return False
        counts = dict(line.split() for line in events.splitlines() if len(line.split()) == 2)
        return int(counts.get("oom_kill", "0")) > 0

    def remove(self, patience: float = 10.0) -> None:
        """Remove the cgroup (``remove_group``)."""
        if self.folder is None:
            return
        remove_group(self.folder, patience)
        self.folder = None

    def describe(self) -> str:
        return f"{self.limit / 2**30:.3g} GB (${VARIABLE})"
