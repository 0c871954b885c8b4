"""The mixing measure (``ofindex.shuffle.neighbour_mixing``) and the orders' inverses it
walks: every order's ``positions_of`` undoes it, the measure equals the one computed from the
forward order (as ``tools/bench_shuffle.py`` did), and a sample estimates it within its error."""

from __future__ import annotations

import numpy as np
import pytest

from ofindex.shuffle import (
    BlockShuffleOrder,
    GlobalShuffleOrder,
    SequentialOrder,
    class_balance,
    displacement,
    mixing_of_epoch,
    neighbour_mixing,
)

SHAPES = [([100, 0, 37, 64, 5], 8, 3), ([1000] * 7, 64, 16), ([13], 4, 1), ([5, 5, 5], 7, 100),
          ([4096, 4096], 64, 1)]


@pytest.mark.parametrize(("shards", "block", "window"), SHAPES)
def test_positions_of_undoes_the_block_order(shards, block, window):
    order = BlockShuffleOrder(shards, block, window, seed=3, epoch=2)
    pos = np.arange(order.n)
    records = order(pos)
    assert np.array_equal(np.sort(records), pos)
    assert np.array_equal(order.positions_of(records), pos)
    assert order.positions_of(int(records[5])) == 5
    with pytest.raises(IndexError):
        order.positions_of([order.n])


def test_positions_of_undoes_the_global_and_sequential_orders():
    g = GlobalShuffleOrder(1001, seed=1, epoch=4)
    assert np.array_equal(g.positions_of(g(np.arange(1001))), np.arange(1001))
    assert np.array_equal(SequentialOrder(9).positions_of([3, 1]), [3, 1])


def _forward_mixing(order) -> float:
    """bench_shuffle's former computation: rank every record from the forward order."""
    n = order.n
    rank = np.empty(n)
    rank[order(np.arange(n))] = np.arange(n)
    return float(np.abs(np.diff(rank)).mean() / (n / 3))


@pytest.mark.parametrize("order", [BlockShuffleOrder([1 << 14] * 4, 64, 16, seed=0),
                                   BlockShuffleOrder([1 << 14] * 4, 8, 1, seed=0),
                                   GlobalShuffleOrder(1 << 16, seed=0),
                                   SequentialOrder(1 << 16)], ids=["b64w16", "b8w1", "global",
                                                                   "sequential"])
def test_the_measure_equals_the_forward_computation_and_a_sample_estimates_it(order):
    exact = neighbour_mixing(order)
    assert exact.stderr == 0.0 and exact.pairs == order.n - 1
    assert exact.value == pytest.approx(_forward_mixing(order), rel=1e-12)
    assert mixing_of_epoch(order(np.arange(order.n))) == pytest.approx(exact.value, rel=1e-12)
    sampled = neighbour_mixing(order, sample=20_000, seed=5)
    assert abs(sampled.value - exact.value) <= 5 * sampled.stderr + 1e-12
    assert sampled == neighbour_mixing(order, sample=20_000, seed=5)  # seeded: the same


def test_the_measure_orders_the_shuffles_and_scales_to_huge_orders():
    n = 1 << 16
    values = [neighbour_mixing(o).value for o in (
        SequentialOrder(n), BlockShuffleOrder([n], 64, 1), BlockShuffleOrder([n], 64, 16),
        GlobalShuffleOrder(n))]
    assert values[0] == pytest.approx(3 / n)
    assert values == sorted(values) and values[-1] == pytest.approx(1.0, abs=0.02)
    huge = BlockShuffleOrder([10**7] * 10**4, 1024, 16, seed=1)  # 1e11 records
    mixing = neighbour_mixing(huge, sample=4096)
    # file neighbours in one block stay within a window of 16 blocks; those crossing a block
    # boundary (1 in 1024) land anywhere: about 1/1024 of a full shuffle's distance
    assert mixing.value == pytest.approx(1 / 1024, rel=0.5)
    with pytest.raises(ValueError, match="sample"):
        neighbour_mixing(huge, sample=0)


def test_class_balance_counts_each_batch_by_hand():
    """Batches of 4: [0 0 0 1] holds 2 classes, its top two all 4; [2 3 4 5] 4 classes, its
    top two 2 of 4; [5 5 5 5] one class. The partial last batch [1 2] is left out."""
    got = class_balance(np.array([0, 0, 0, 1, 2, 3, 4, 5, 5, 5, 5, 5, 1, 2]), 4)
    assert got.batches == 3
    assert got.first_batch_classes == 2
    assert got.classes_per_batch == pytest.approx((2 + 4 + 1) / 3)
    assert got.top2_share == pytest.approx((1.0 + 0.5 + 1.0) / 3)


def test_class_balance_of_sorted_and_of_shuffled_labels():
    """Labels stored class by class (20 classes of 500) read in file order give 1-2 classes
    a batch of 256; a uniform shuffle gives nearly all 20, its top two about 2/20 + a bit."""
    labels = np.repeat(np.arange(20), 500)
    sorted_read = class_balance(labels, 256)
    assert sorted_read.first_batch_classes == 1
    assert sorted_read.classes_per_batch < 2.0 and sorted_read.top2_share == 1.0
    shuffled = class_balance(np.random.default_rng(0).permutation(labels), 256)
    assert shuffled.classes_per_batch > 19.5
    assert 0.1 < shuffled.top2_share < 0.2


def test_class_balance_refuses_what_it_cannot_measure():
    with pytest.raises(ValueError, match="batch_size"):
        class_balance(np.arange(4), 0)
    with pytest.raises(ValueError, match="no whole batch"):
        class_balance(np.arange(3), 4)
    with pytest.raises(ValueError, match="non-negative"):
        class_balance(np.array([0, -1]), 2)


def test_displacement_is_zero_in_file_order_and_one_for_a_uniform_order():
    n = 30_000
    assert displacement(np.arange(n)) == 0.0
    assert displacement(np.arange(n)[::-1]) == pytest.approx(1.5, rel=1e-3)  # n/2 of n/3
    assert displacement(np.random.default_rng(1).permutation(n)) == pytest.approx(1.0, abs=0.02)
    assert displacement(np.array([1, 0, 3, 2])) == pytest.approx(1 / (4 / 3))  # mean 1
