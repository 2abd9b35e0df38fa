"""How the package words what it counts, and an error on one line."""

from __future__ import annotations

from collections.abc import Iterable


def counted(count: int, noun: str) -> str:
    """``1 gather``, ``2 gathers``: a count with its noun in the number it takes."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def listed(names: Iterable[str], limit: int = 5, quoted: bool = True) -> str:
    """``'a', 'b'``: names (quoted unless told not to) joined, at most ``limit`` of them then ``and 9,995 more``,
    so that an error naming the members of a file of 10,000 stays one readable line."""
    names = list(names)
    shown = ", ".join(map(repr if quoted else str, names[:limit]))
    return f"{shown} and {len(names) - limit:,} more" if len(names) > limit else shown


def one_line(error: BaseException, typed: bool = True) -> str:
    """The error on one line, in full, without the bare source locations some runtimes stack in front of it."""
    lines = [line.strip() for line in str(error).splitlines()]
    text = " ".join(line for line in lines if line and not line.startswith("Exception from "))
    text = text or type(error).__name__
    return f"{type(error).__name__}: {text}" if typed else text
