"""Delta debugging (Zeller and Hildebrandt's ``ddmin``) over a model's nodes, for ``onnx-gather reduce``: from a set
of positions that shows a symptom, a subset that still shows it and is 1-minimal (leaving out any one of its
positions loses the symptom), trying large chunks before single positions, so that a symptom in one node of a
700-node model takes tens of tests, not hundreds.

1. Split the set into ``n`` chunks (2 at first). If one chunk alone shows it, keep that chunk (and split it in 2).
2. Else, if the set without one chunk shows it, keep that complement (and split it in ``n - 1``).
3. Else split finer (``2n``), until the chunks are single positions: then no single position can be left out, and
   the set is 1-minimal.

Each set is tested once (answers are remembered). A budget of tests, when given, ends the search early with the
smallest set that showed the symptom so far, said to be not minimal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """What a test tried: the positions kept, whether they showed the symptom, and how the search stands."""

    kept: tuple[int, ...]
    shows: bool
    tests: int  # tests made so far, this one included
    smallest: int  # positions in the smallest set that showed it so far
    granularity: int  # chunks the current set is split into
    most_left: int  # at most this many more tests at this granularity


@dataclass(frozen=True)
class Minimized:
    """The smallest set found, the tests made, and whether it is 1-minimal (False: the budget ran out first)."""

    kept: tuple[int, ...]
    tests: int
    minimal: bool


class BudgetSpent(Exception):
    """No test left in the budget."""


def _chunks(items: Sequence[int], count: int) -> list[tuple[int, ...]]:
    """``items`` in ``count`` consecutive chunks of near-equal sizes (the graph's order kept)."""
    size, extra = divmod(len(items), count)
    chunks, start = [], 0
    for index in range(count):
        end = start + size + (index < extra)
        chunks.append(tuple(items[start:end]))
        start = end
    return chunks


def ddmin(
    positions: Sequence[int],
    shows: Callable[[tuple[int, ...]], bool],
    budget: Callable[[], bool] | None = None,
    told: Callable[[Step], object] | None = None,
) -> Minimized:
    """A 1-minimal subset of ``positions`` (which show the symptom) that ``shows`` it. ``budget``: asked before each
    test, False ends the search (the result then not minimal); ``told``: called after each test."""
    current = tuple(sorted(positions))
    answers: dict[tuple[int, ...], bool] = {current: True}
    granularity = 2
    tests = 0

    def test(kept: tuple[int, ...], left: int) -> bool:
        nonlocal tests
        if kept in answers:
            return answers[kept]
        if budget is not None and not budget():
            raise BudgetSpent
        tests += 1
        answers[kept] = result = shows(kept)
        smallest = min((len(k) for k, shown in answers.items() if shown), default=len(current))
        if told is not None:
            told(Step(kept, result, tests, smallest, granularity, left))
        return result

    try:
        while len(current) >= 2:
            granularity = min(granularity, len(current))
            chunks = _chunks(current, granularity)
            candidates = [(chunk, 2) for chunk in chunks]
            if granularity > 2:  # with 2 chunks each is the other's complement, already tried
                candidates += [(tuple(p for p in current if p not in chunk), granularity - 1) for chunk in chunks]
            found = None
            for index, (candidate, next_granularity) in enumerate(candidates):
                if test(candidate, len(candidates) - index - 1):
                    found = candidate, next_granularity
                    break
            if found is not None:
                current, granularity = found[0], max(found[1], 2)
            elif granularity < len(current):
                granularity = min(2 * granularity, len(current))
            else:
                break  # every single position was left out in turn: 1-minimal
    except BudgetSpent:
        smallest = min((kept for kept, shown in answers.items() if shown), key=len)
        return Minimized(smallest, tests, minimal=False)
    return Minimized(current, tests, minimal=True)
