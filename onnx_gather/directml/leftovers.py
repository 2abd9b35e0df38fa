"""What a run of onnx-gather that was killed (``kill -9``: no ``finally`` runs) left of its Windows programs under
Wine: its private folder ``onnx-gather-dml-<pid>-<start>-XXXX`` in $TMPDIR, its memory cgroup of the same name, and
the Wine processes of its prefix (the Wine server and its services; the runner and Xvfb die with their parent).

The names carry the owner's process id and its start time (``/proc/<pid>/stat``, in clock ticks since boot), so a
later run can tell a dead owner from a live one, and from a new process that reuses the id. Nothing else is touched:
names of another form, folders of another user, a live run's folder.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import time
from pathlib import Path

from onnx_gather.directml.memory_limit import groups, remove_group

PREFIX = "onnx-gather-dml-"
_NAME = re.compile(rf"^{PREFIX}(\d+)-(\d+)-[A-Za-z0-9_]+$")


def stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` from field 3 (the state) on, or None when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # after the command's name
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    """When process ``pid`` started (field 22 of ``/proc/<pid>/stat``), or None when there is no such process."""
    fields = stat_fields(pid)
    return None if fields is None else int(fields[19])


def prefix() -> str:
    """The start of this process's folder and cgroup names: ``onnx-gather-dml-<pid>-<start>-``."""
    return f"{PREFIX}{os.getpid()}-{start_time(os.getpid())}-"


def dead_owner(name: str) -> bool:
    """Whether ``name`` is one of onnx-gather's (this module's form) whose owner has ended."""
    match = _NAME.match(name)
    return match is not None and start_time(int(match[1])) != int(match[2])


def _processes_of(prefix_folder: Path) -> list[int]:
    """This user's processes whose Wine prefix is ``prefix_folder`` (its Wine server and services)."""
    wanted = f"WINEPREFIX={prefix_folder}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if entry.stat().st_uid != os.getuid():
                continue
            environment = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if wanted in environment:
            found.append(int(entry.name))
    return found


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while any((fields := stat_fields(pid)) is not None and fields[0] != "Z" for pid in pids):
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)


def remove_dead(temporary: Path) -> list[str]:
    """Remove what dead runs left in ``temporary`` ($TMPDIR) and in the memory cgroups; the names removed."""
    removed = []
    for group in groups():  # first: killing its processes ends the Wine processes of the dead run
        if dead_owner(group.name):
            remove_group(group, patience=0.0)
            removed.append(group.name)
    try:
        entries = list(temporary.iterdir())
    except OSError:
        entries = []
    for folder in entries:
        if not dead_owner(folder.name):
            continue
        try:
            mine = folder.is_dir() and not folder.is_symlink() and folder.stat().st_uid == os.getuid()
        except OSError:
            continue
        if mine:
            _kill(_processes_of(folder / "prefix"))
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder.name)
    return removed
