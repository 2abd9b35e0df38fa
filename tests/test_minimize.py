"""Delta debugging over node positions: 1-minimal results, chunks before single positions, a budget, and the estimate
of the tests to come."""

from __future__ import annotations

import itertools
import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnx_gather.runtime.minimize import ddmin


def _one_minimal(kept, shows) -> bool:
    return all(not shows(tuple(p for p in kept if p != left)) for left in kept) if len(kept) > 1 else True


@pytest.mark.parametrize("culprit", [0, 1, 350, 698, 699])
def test_one_node_of_700_takes_tens_of_tests(culprit):
    found = ddmin(range(700), lambda kept: culprit in kept)
    assert found.kept == (culprit,) and found.minimal
    assert found.tests <= 2 * 10 + 2  # about two per halving


def test_two_nodes_needed_together_are_both_kept():
    found = ddmin(range(300), lambda kept: {12, 200} <= set(kept))
    assert found.kept == (12, 200) and found.minimal


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 60), st.data())
def test_the_result_shows_it_and_is_one_minimal(count, data):
    """Any monotone or not symptom: the result shows it, and leaving out any one position loses it."""
    needed = data.draw(st.lists(st.sets(st.integers(0, count - 1), min_size=1, max_size=3), min_size=1, max_size=3))

    def shows(kept):
        return any(group <= set(kept) for group in needed)

    found = ddmin(range(count), shows)
    assert shows(found.kept) and found.minimal and _one_minimal(found.kept, shows)


def test_each_set_is_tested_once():
    tried = []

    def shows(kept):
        tried.append(kept)
        return 7 in kept or 40 in kept

    ddmin(range(64), shows)
    assert len(tried) == len(set(tried))


def test_a_spent_budget_ends_with_the_smallest_set_that_showed_it_said_to_be_not_minimal():
    counter = itertools.count()
    found = ddmin(range(500), lambda kept: 123 in kept, budget=lambda: next(counter) < 3)
    assert not found.minimal and found.tests == 3 and 123 in found.kept and len(found.kept) < 500


def test_each_test_is_told_with_how_the_search_stands():
    steps = []
    ddmin(range(16), lambda kept: 5 in kept, told=steps.append)
    assert [step.tests for step in steps] == list(range(1, len(steps) + 1))
    assert steps[-1].smallest == 1 and all(step.estimate >= 0 for step in steps)


def _factor(step, tests: int) -> float:
    """How far a step's estimate is from the tests made after it, as a factor (4 added to both: a few tests more or
    less at the end are no error)."""
    ratio = (tests - step.tests + 4) / (step.estimate + 4)
    return max(ratio, 1 / ratio)


@st.composite
def _symptoms(draw):
    """A set of 1 to 300 positions and a symptom on it: it shows where the kept positions hold one of 1 to 3 groups,
    each of 1 to 40 positions and at most half the set, scattered or in one run."""
    count = draw(st.integers(1, 300))
    rng = random.Random(draw(st.integers(0, 2**32)))
    groups = []
    for _ in range(draw(st.integers(1, 3))):
        size = draw(st.integers(1, max(1, min(count // 2, 40))))
        if draw(st.booleans()):
            groups.append(frozenset(rng.sample(range(count), size)))
        else:
            start = rng.randrange(count - size + 1)
            groups.append(frozenset(range(start, start + size)))
    return count, groups


@settings(max_examples=150, deadline=None)
@given(_symptoms())
def test_the_estimate_follows_the_tests_to_come(symptom):
    """No bound of the tests to come is of use (ddmin's worst case grows with the square of the set), so each step
    estimates them: in most steps of a search within a factor of 3 of the tests made after it, and once the search has
    made a quarter of its tests, within 20 at every step (halvings to come, the estimate before, was within 3 in a
    quarter of the steps, and off by up to 77 after the first quarter)."""
    count, groups = symptom
    steps = []
    found = ddmin(range(count), lambda kept: any(group <= set(kept) for group in groups), told=steps.append)
    factors = [_factor(step, found.tests) for step in steps]
    if not factors:
        return
    assert sum(factor <= 3 for factor in factors) >= len(factors) / 2
    assert statistics.median(factors) <= 3
    assert max(factors[len(factors) // 4 :]) <= 20


@pytest.mark.parametrize(("needed", "seed"), [(3, 1), (4, 2), (5, 3)])
def test_a_long_search_is_estimated_as_long(needed, seed):
    # a symptom of a few nodes scattered over 1,493: halvings to come said 18 to 34 where 95 to 204 tests were to come
    culprits = set(random.Random(seed).sample(range(1493), needed))
    steps = []
    found = ddmin(range(1493), lambda kept: culprits <= set(kept), told=steps.append)
    assert found.tests >= 120
    assert all(_factor(steps[len(steps) * k // 4], found.tests) <= 3 for k in (1, 2, 3))
