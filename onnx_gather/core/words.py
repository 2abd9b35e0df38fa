"""How the package words what it counts."""

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
