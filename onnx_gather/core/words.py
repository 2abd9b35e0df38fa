"""How the package words what it counts."""

from __future__ import annotations


def counted(count: int, noun: str) -> str:
    """``1 gather``, ``2 gathers``: a count with its noun in the number it takes."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
