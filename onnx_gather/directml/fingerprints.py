"""What set-up records of each file it places (its SHA-256, size and modification time), and how a file differs from
that record now.

A full comparison (``setup-directml`` and its ``--check``) hashes every file: about 40 ms for the 42 MB of DLLs,
programs and d3d12.dll (hard links hashed once, files in the page cache). A quick one (at every runner's start, and
where a backend asks whether real DirectML is there) compares sizes and modification times and hashes only a file
whose time changed (a copy that did not keep times): under a millisecond, against the seconds a Wine start costs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path

Record = Mapping[str, object]


def sha256(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def record(path: Path) -> dict[str, object]:
    """What set-up records of a file it placed."""
    status = path.stat()
    return {"sha256": sha256(path), "size": status.st_size, "mtime_ns": status.st_mtime_ns}


def is_record(value: object) -> bool:
    """Whether ``value`` is what ``record`` makes (as read back from JSON)."""
    if not isinstance(value, dict):
        return False
    return isinstance(value.get("sha256"), str) and all(type(value.get(k)) is int for k in ("size", "mtime_ns"))


def differences(folder: Path, names: Iterable[str], records: Mapping[str, Record], full: bool) -> dict[str, str]:
    """For each of ``names`` (paths in ``folder``) that differs from its record, how ("is missing", ...). A record
    of a SHA-256 alone (a pinned hash) is always compared by hashing; hard links are hashed once."""
    digests: dict[tuple[int, int], str] = {}
    found = {}
    for name in names:
        path, expected = folder / name, records.get(name)
        status = path.stat() if path.is_file() else None
        if status is None:
            found[name] = "is missing"
        elif expected is None:
            found[name] = "is not recorded in state.json"
        elif expected.get("size", status.st_size) != status.st_size:
            found[name] = f"has {status.st_size:,} bytes, not the {expected['size']:,} set-up placed"
        elif full or status.st_mtime_ns != expected.get("mtime_ns"):
            inode = (status.st_dev, status.st_ino)
            digest = digests[inode] if inode in digests else digests.setdefault(inode, sha256(path))
            if digest != expected["sha256"]:
                whose = "set-up placed" if "size" in expected else "pinned"
                found[name] = f"has SHA-256 {digest[:16]}..., not the {str(expected['sha256'])[:16]}... {whose}"
    return found
