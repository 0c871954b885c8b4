"""FeistelPermutation: bijection for every n, determinism, inverse, statistics, O(1) memory."""

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ofindex.shuffle import FeistelPermutation
from ofindex.shuffle.orders import BlockShuffleOrder

PRIMES = [5, 7, 11, 13, 97, 101, 997, 7919, 65521, 1000003]
POW2 = [1 << k for k in range(21)]
SIZES = sorted(
    {1, 2, 3, 6, 10, 100, 1000, 12345, *PRIMES, *POW2}
    | {p + 1 for p in POW2}
    | {p - 1 for p in POW2 if p > 1}
)


def _is_perm(y, n):
    return y.dtype == np.int64 and y.shape == (n,) and np.array_equal(np.sort(y), np.arange(n))


@pytest.mark.parametrize("n", SIZES)
def test_bijection_exhaustive(n):
    for seed, epoch in [(0, 0), (123, 7)]:
        p = FeistelPermutation(n, seed=seed, epoch=epoch)
        y = p.range()
        assert _is_perm(y, n), n
        assert np.array_equal(p.inverse(y), np.arange(n))
        assert np.array_equal(p(np.arange(n)), y)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 5000), seed=st.integers(-(2**70), 2**70), epoch=st.integers(0, 10**6),
       rounds=st.integers(2, 8))
def test_bijection_property(n, seed, epoch, rounds):
    p = FeistelPermutation(n, seed, epoch, rounds=rounds)
    assert _is_perm(p.range(), n)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 2**62), data=st.data())
def test_inverse_on_huge_domains(n, data):
    xs = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=50))
    x = np.array(xs, dtype=np.int64)
    p = FeistelPermutation(n, seed=9)
    y = p(x)
    assert ((y >= 0) & (y < n)).all()
    assert np.array_equal(p.inverse(y), x)
    # distinct inputs map to distinct outputs
    assert len(set(y.tolist())) == len(set(x.tolist()))


def test_golden_orders():
    # Golden values: only update if you change the permutation deliberately (it changes every
    # user's epoch order and breaks resuming checkpoints across versions).
    assert FeistelPermutation(1000).range(0, 10).tolist() == [
        446, 866, 975, 308, 297, 336, 425, 921, 25, 553]
    assert FeistelPermutation(1000, seed=0, epoch=1).range(0, 10).tolist() == [
        247, 158, 76, 551, 406, 827, 890, 362, 461, 880]
    assert FeistelPermutation(10**12, seed=42, epoch=3)(np.arange(5)).tolist() == [
        625103477893, 252154646532, 109736015902, 319864425267, 704995345526]
    assert FeistelPermutation(65537, seed=7).range(0, 8).tolist() == [
        61596, 18543, 65173, 59218, 52156, 56605, 35301, 47596]
    assert BlockShuffleOrder([100, 37, 250], 16, 4, seed=5, epoch=1)(np.arange(10)).tolist() == [
        276, 154, 123, 271, 128, 119, 160, 118, 265, 163]


def test_scalar_shapes_and_errors():
    p = FeistelPermutation(50, seed=1)
    assert isinstance(p(3), int) and p(3) == int(p(np.array([3]))[0])
    assert p(np.arange(12).reshape(3, 4)).shape == (3, 4)
    assert p(np.array([], dtype=np.int64)).shape == (0,)
    with pytest.raises(IndexError):
        p(50)
    with pytest.raises(IndexError):
        p(-1)
    with pytest.raises(TypeError):
        p(np.array([1.5]))
    for bad in (0, -3, 2**63):
        with pytest.raises(ValueError):
            FeistelPermutation(bad)
    assert FeistelPermutation(1)(0) == 0


def test_seed_epoch_change_order_and_pickle():
    n = 10_000
    base = FeistelPermutation(n, 1, 0).range()
    assert not np.array_equal(base, FeistelPermutation(n, 1, 1).range())
    assert not np.array_equal(base, FeistelPermutation(n, 2, 0).range())
    assert not np.array_equal(base, np.arange(n))
    q = pickle.loads(pickle.dumps(FeistelPermutation(n, 1, 0)))
    assert q == FeistelPermutation(n, 1, 0) and np.array_equal(q.range(), base)
    # distinct epochs agree on only ~1 position out of n, as for independent shuffles
    assert (base == FeistelPermutation(n, 1, 1).range()).sum() < 10


def test_statistics_large_n():
    n = 1 << 20 | 12345
    p = FeistelPermutation(n, seed=3)
    i = np.arange(n)
    y = p.range().astype(np.float64)
    r = np.corrcoef(i, y)[0, 1]
    assert abs(r) < 5 / np.sqrt(n)  # no correlation between position and record
    # successive positions are not successive records
    d = np.abs(np.diff(y))
    assert abs(d.mean() / n - 1 / 3) < 0.01  # mean |U - V| of two uniforms is 1/3
    # each of 16 contiguous "shards" is spread evenly over the epoch (chi-square, 16x16 table)
    shard = np.minimum(i * 16 // n, 15)
    tenth = np.minimum(p.inverse(i) * 16 // n, 15)
    table = np.bincount(shard * 16 + tenth, minlength=256).reshape(16, 16)
    expected = np.outer(table.sum(1), table.sum(0)) / n
    chi2 = ((table - expected) ** 2 / expected).sum()
    assert chi2 < 225 + 6 * np.sqrt(2 * 225)  # 225 degrees of freedom


def test_first_position_uniform_over_seeds():
    n, trials = 10, 5000
    firsts = np.array([FeistelPermutation(n, seed=s)(0) for s in range(trials)])
    counts = np.bincount(firsts, minlength=n)
    chi2 = ((counts - trials / n) ** 2 / (trials / n)).sum()
    assert chi2 < 9 + 6 * np.sqrt(18)


def test_chunked_memory_is_constant():
    import tracemalloc

    for n in (10**6, 10**12):
        p = FeistelPermutation(n, seed=1)
        tracemalloc.start()
        for _ in p.iter_chunks(0, 300_000):
            pass
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 8 << 20, (n, peak)
