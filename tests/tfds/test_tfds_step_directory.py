"""The step directory of RLDS splits (issue 47: ``steps[j]`` -> (episode, step) in O(1)):
every global step found in its episode as a binary search of the cumulative counts finds it,
on step counts of every shape (empty episodes, one-step episodes beside long ones, one
episode), and the episodes each lookup moves past stay few."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ofindex.tfds.step_directory import StepDirectory


def _by_search(counts: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ends = np.cumsum(counts)
    episode = np.searchsorted(ends, positions, side="right")
    return episode, positions - (ends[episode] - counts[episode])


def _by_walk(counts: list[int]) -> tuple[list[int], list[int]]:
    episodes, steps = [], []
    for e, count in enumerate(counts):
        episodes += [e] * count
        steps += list(range(count))
    return episodes, steps


@settings(derandomize=True, max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=60).filter(lambda c: sum(c) > 0))
def test_every_step_is_found_in_its_episode(counts):
    directory = StepDirectory(np.array(counts))
    episodes, steps = directory.locate(np.arange(sum(counts)))
    assert (episodes.tolist(), steps.tolist()) == _by_walk(counts)
    assert len(directory) == sum(counts)


@pytest.mark.parametrize("counts", [
    [1], [5], [0, 0, 3, 0], [300] * 7, [1] * 50 + [10_000], [10_000] + [1] * 50,
    [0] * 100 + [2], list(range(1, 200)),
])
def test_shapes_of_step_counts(counts):
    counts_array = np.array(counts)
    positions = np.arange(sum(counts))
    got = StepDirectory(counts_array).locate(positions)
    want = _by_search(counts_array, positions)
    assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()


def test_the_directory_has_about_one_entry_per_episode():
    counts = np.random.default_rng(5).integers(100, 301, size=1000)  # DROID-like episodes
    directory = StepDirectory(counts)
    assert len(directory.first) <= 2 * len(counts)
    positions = np.arange(len(directory))
    start = directory.first[positions >> directory.shift]
    found, _ = directory.locate(positions)
    assert int((found - start).max()) <= 2  # episodes moved past: never more than two here
