"""Delta debugging over node positions: 1-minimal results, chunks before single positions, a budget."""

from __future__ import annotations

import itertools

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
    assert steps[-1].smallest == 1 and all(step.most_left >= 0 for step in steps)
