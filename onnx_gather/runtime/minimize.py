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

How many tests are still to come is estimated, not bounded: the most ddmin can still make, whatever the answers, grows
with the square of the set (91,314 tests from the start for 300 positions, 1,110 for 32), where a symptom in one node
takes about 1.5 per halving. The estimate (``Step.estimate``) follows what the search has seen: how many chunks the
symptom needed at each chunk size so far (``_Needed``), extrapolated to the chunk sizes to come, and the round under
way: the chunks it has still to try, the answers it already has. Measured on symptoms such as tests/test_minimize.py
draws (1 to 3 groups of up to 40 positions, scattered or in a run) in sets of 1 to 300 and of 500 to 1,500 positions,
it is within a factor of 3 of the tests that follow in 96% and 91% of the steps (halvings to come, the estimate before
it: 27% and 17%). A symptom that needs most of the set is
underestimated once the search leaves out single positions, up to 40 times: such searches take thousands of tests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Step:
    """What a test tried: the positions kept, whether they showed the symptom, and how the search stands."""

    kept: tuple[int, ...]
    shows: bool
    tests: int  # tests made so far, this one included
    smallest: int  # positions in the smallest set that showed it so far
    granularity: int  # chunks the current set is split into
    estimate: int  # about this many more tests to come: an estimate, not a bound (the module says why)


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


@dataclass
class _Needed:
    """How many chunks the symptom needed at each chunk size the search went through (all of them, where a round found
    none to leave out; one, where a chunk showed it alone; as the chunks left out tell, while they are), and so how
    many it will need at smaller ones."""

    seen: list[tuple[float, float]] = field(default_factory=list)  # (chunk size, chunks needed), sizes decreasing

    def at(self, size: float) -> float:
        """Chunks of ``size`` positions the symptom needs: at the last size seen, times the growth per halving between
        the last two (from 1, all in as many chunks as before, to 2, in every half), where both needed more than one
        chunk (a symptom leaving one chunk always needs two next); 1 before any size was seen (in one chunk)."""
        if not self.seen:
            return 1.0
        last_size, last = self.seen[-1]
        growth = 1.0
        if len(self.seen) >= 2 and self.seen[-2][1] >= 2:
            size_before, before = self.seen[-2]
            growth = min(max((last / before) ** (1 / math.log2(size_before / last_size)), 1.0), 2.0)
        return last * growth ** math.log2(last_size / size) if last_size > size else float(last)

    def plus(self, size: float, chunks: float) -> _Needed:
        """With ``chunks`` needed at ``size``: a size of its own, or where the last was less than half as large again
        (the same level, after chunks left out), in its place."""
        same = self.seen and self.seen[-1][0] < 1.5 * size
        return _Needed([*(self.seen[:-1] if same else self.seen), (size, chunks)])

    def removed(self, size: float, granularity: int, removals: int, failed: int) -> _Needed:
        """After the ``removals``-th chunk of ``size`` left out in a row, whose complement came after ``failed``
        needed ones in its round: the k-th of f free chunks among h needed comes after about k h / (f + 1), which
        tells how many of the ``granularity - 1`` chunks left are needed (revising the estimate of the removal
        before at this size)."""
        prior = min(max(self.at(size), 1.0), granularity)
        per_free = (failed + prior / (granularity - prior + 1)) / (removals + 1)
        left = granularity - 1
        free = max((left - per_free * (removals + 1)) / (1 + per_free), 0.0)
        return self.plus(size, left - free)


def _answered(count: float, granularity: float) -> float:
    """Of ``count`` positions in ``granularity`` chunks of one or two, the chunks of one: split finer, they are the
    same chunks again, alone and left out, and answered already."""
    return max(2 * granularity - count, 0.0) if count < 2 * granularity else 0.0


def _tests_from(count: float, granularity: float, needed: _Needed, answered: float = 0.0) -> float:
    """About how many tests ddmin makes from the start of a round on ``count`` positions in ``granularity`` chunks,
    ``answered`` of them already alone and without (chunks of one position after chunks of one or two). A symptom in
    one chunk: a subset shows it, halfway through the subsets. Else the first round tests every subset, and each
    round that leaves out a chunk free of the symptom tests the complements up to it and goes on with one chunk less
    of the same size (their subsets answered already): the k-th of f free chunks among h needed ones comes after
    about k h / (f + 1) of these. The last round at a size tests every complement and splits finer."""
    total = 0.0
    while count >= 2:
        granularity = min(granularity, count)
        size = count / granularity
        wanted = min(max(needed.at(size), 1.0), granularity)
        if wanted < 1.5:
            total += (granularity + 1) / 2 if granularity > 2 else 1.5
            count, granularity, needed, answered = size, 2, needed.plus(size, 1), 0.0
            continue
        free = granularity - wanted if granularity > 2 else 0.0
        last = max(wanted - answered, 0.0) if wanted > 2 else 0.0
        total += granularity - answered + wanted * free / 2 + free + last
        count, needed = wanted * size, needed.plus(size, round(wanted))
        if size <= 1:
            break
        answered = _answered(count, wanted)
        granularity = min(2 * wanted, count)
    return total


@dataclass(frozen=True)
class _Test:
    """A test and where its round stands: the set's size and granularity, the test's index among the round's
    candidates, the subsets and complements after it not answered yet, the complements that lost the symptom before
    it (chunks it needs), and the candidate's size and the granularity ddmin goes on with where it shows it."""

    count: int
    granularity: int
    index: int
    subsets_left: int
    complements_left: int
    failed: int
    removals: int  # chunks of this size left out in a row before this round
    kept: int
    next_granularity: int


# How many complements tried the expected share of free chunks is worth, against those of the round tried in vain.
_PRIOR_WEIGHT = 4.0


def _estimate(test: _Test, shown: bool, needed: _Needed) -> float:
    """About how many more tests ddmin makes after ``test`` (which ``shown`` the symptom or not). Where the round goes
    on, it either finds a free chunk among the complements left, by the chance the chunks needed leave, or splits
    finer: the two weighed by that chance."""
    size = test.count / test.granularity
    subset = test.index < test.granularity
    if shown:
        after = (
            needed.plus(size, 1) if subset else needed.removed(size, test.granularity, test.removals + 1, test.failed)
        )
        return _tests_from(test.kept, test.next_granularity, after)
    wanted = needed.at(size)
    if test.subsets_left and wanted < 1.5:  # in one chunk: a subset left shows it
        return (test.subsets_left + 1) / 2 + _tests_from(size, 2, needed.plus(size, 1))
    left = test.subsets_left + test.complements_left
    finer = left
    if test.granularity < test.count:
        answered = _answered(test.count, test.granularity)
        finer += _tests_from(test.count, 2 * test.granularity, needed.plus(size, test.granularity), answered)
    if test.granularity == 2:
        return finer
    wanted = min(max(wanted, 1.0), test.granularity)
    tried = test.failed + (not subset)  # complements tried in the round, all in vain
    # the chance that a chunk not tried is free: the expected share of free chunks, less for each tried in vain
    free = _PRIOR_WEIGHT * (test.granularity - wanted) / test.granularity / (tried + _PRIOR_WEIGHT)
    chance = 1 - (1 - free) ** test.complements_left
    to_free = min(test.complements_left, (1 - free) / free + 1) if free else test.complements_left
    smaller = test.subsets_left + to_free + _tests_from(test.count - size, test.granularity - 1, needed)
    return chance * smaller + (1 - chance) * finer


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
    needed = _Needed()
    removals = 0  # chunks of the current size left out in a row

    def test(kept: tuple[int, ...], where: _Test) -> bool:
        nonlocal tests
        if kept in answers:
            return answers[kept]
        if budget is not None and not budget():
            raise BudgetSpent
        tests += 1
        answers[kept] = result = shows(kept)
        smallest = min((len(k) for k, shown in answers.items() if shown), default=len(current))
        if told is not None:
            told(Step(kept, result, tests, smallest, granularity, round(_estimate(where, result, needed))))
        return result

    try:
        while len(current) >= 2:
            granularity = min(granularity, len(current))
            chunks = _chunks(current, granularity)
            candidates = [(chunk, 2) for chunk in chunks]
            if granularity > 2:  # with 2 chunks each is the other's complement, already tried
                candidates += [(tuple(p for p in current if p not in chunk), granularity - 1) for chunk in chunks]
            unanswered = [candidate not in answers for candidate, _ in candidates]
            subsets, complements = sum(unanswered[:granularity]), sum(unanswered[granularity:])
            found, failed = None, 0
            for index, (candidate, next_granularity) in enumerate(candidates):
                subsets -= unanswered[index] and index < granularity
                complements -= unanswered[index] and index >= granularity
                size, then = len(candidate), max(next_granularity, 2)
                where = _Test(len(current), granularity, index, subsets, complements, failed, removals, size, then)
                if test(candidate, where):
                    found = candidate, then, index < granularity
                    break
                failed += index >= granularity
            chunk_size = len(current) / granularity
            if found is None and granularity >= len(current):
                break  # every single position was left out in turn: 1-minimal
            if found is None:
                needed, removals = needed.plus(chunk_size, granularity), 0
                granularity = min(2 * granularity, len(current))
            elif found[2]:  # one chunk shows it alone
                needed, removals = needed.plus(chunk_size, 1), 0
                current, granularity = found[0], found[1]
            else:  # a chunk left out
                removals += 1
                needed = needed.removed(chunk_size, granularity, removals, failed)
                current, granularity = found[0], found[1]
    except BudgetSpent:
        smallest = min((kept for kept, shown in answers.items() if shown), key=len)
        return Minimized(smallest, tests, minimal=False)
    return Minimized(current, tests, minimal=True)
