"""Files written atomically through temporary files whose owner a later run can tell, and leftovers removed.

A temporary file is named ``.NAME.og-PLACE-BOOT-PID-START.XXXXXXXX.tmp``: PLACE hashes the host name and the pid
namespace, BOOT is the start of the kernel's boot id, PID and START the writer's process id and its start time in
clock ticks since boot (``/proc/PID/stat``), so that a reused pid is not taken for the writer. A later write into
the same folder removes such a file when its writer is gone: same place, and another boot or no process PID started
at START. A file of another place (another host or container) is left alone, as is every name not of this form.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

_OWNER = re.compile(r"og-(?P<place>[0-9a-f]{6})-(?P<boot>[0-9a-f]{8})-(?P<pid>\d+)-(?P<start>\d+)")
_TEMPORARY = re.compile(rf"\.(?P<target>.+)\.{_OWNER.pattern}\.[a-z0-9_]{{8}}\.tmp")


def _start_time(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot; None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[19])  # field 22; the name before ")" may hold spaces


@functools.cache
def _place_and_boot() -> tuple[str, str]:
    try:
        namespace = os.readlink("/proc/self/ns/pid")
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")[:8]
    except OSError:  # no /proc: owners cannot be told, so nothing is ever taken for a leftover
        namespace, boot = "unknown", "0" * 8
    place = hashlib.sha1(f"{socket.gethostname()}\0{namespace}".encode()).hexdigest()[:6]
    return place, boot


def owner_tag() -> str:
    """This process, as it is written into the names of its temporary files."""
    place, boot = _place_and_boot()
    return f"og-{place}-{boot}-{os.getpid()}-{_start_time(os.getpid()) or 0}"


def temporary_file(folder: Path, name: str) -> tuple[int, Path]:
    """A new temporary file for ``name`` in ``folder``, named with its owner: an open handle and its path."""
    handle, path = tempfile.mkstemp(dir=folder, prefix=f".{name}.{owner_tag()}.", suffix=".tmp")
    return handle, Path(path)


def _writer_alive(match: re.Match) -> bool:
    place, boot = _place_and_boot()
    if match["place"] != place or boot == "0" * 8:
        return True  # another host or container, or no /proc here: it cannot be told, so it counts as alive
    if match["boot"] != boot:
        return False  # written before the machine last started
    return _start_time(int(match["pid"])) == int(match["start"])


def _entries(folder: Path) -> list[os.DirEntry] | None:
    """The entries of ``folder``; None when it cannot be listed (a folder one may write in but not read)."""
    try:
        with os.scandir(folder) as entries:
            return list(entries)
    except OSError:
        return None


def names(folder: Path) -> list[str]:
    """The names in ``folder``; none when it cannot be listed."""
    return [entry.name for entry in _entries(folder) or []]


def live_temporaries(folder: Path, target: str) -> bool:
    """Whether a process other than this one is writing ``target`` in ``folder`` (has a temporary file for it);
    True when the folder cannot be listed."""
    mine = owner_tag()
    entries = _entries(folder)
    if entries is None:
        return True
    for entry in entries:
        match = _TEMPORARY.fullmatch(entry.name)
        if (
            match
            and match["target"] == target
            and not entry.name.startswith(f".{target}.{mine}.")
            and _writer_alive(match)
        ):
            return True
    return False


def remove_leftovers(folder: Path) -> list[Path]:
    """Remove onnx-gather's temporary files in ``folder`` whose writer is gone; the paths removed."""
    removed = []
    for entry in _entries(folder) or []:
        match = _TEMPORARY.fullmatch(entry.name)
        if match and entry.is_file(follow_symlinks=False) and not _writer_alive(match):
            with_path = Path(entry.path)
            with_path.unlink(missing_ok=True)
            removed.append(with_path)
    return removed


def file_mode() -> int:
    """What a new file gets under the process's umask (which can only be read by setting it)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomically(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write through a temporary file in the same folder, renamed over ``path`` only once complete.

    The file gets the mode the umask gives a new file, as any tool's output does (a temporary file is 0600).
    """
    handle, temporary = temporary_file(path.parent, path.name)
    try:
        os.fchmod(handle, file_mode())
        with os.fdopen(handle, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
