"""Epoch orders: maps from epoch positions to record indices, one per epoch.

An *order* (:class:`EpochOrder`) has ``n`` and
``__call__(positions: int64 array) -> record indices (int64 array)``; it is a bijection of
``range(n)``, needs O(1) memory (O(number of shards) for the block order) and is rebuilt per
epoch by a sampler from ``(seed, epoch)``. Positions outside ``range(n)`` raise ``IndexError``.

* :class:`SequentialOrder`: record ``i`` at position ``i``.
* :class:`GlobalShuffleOrder`: a :class:`~ofindex.shuffle.permutation.FeistelPermutation` over
  all records of all shards: the best mixing, but consecutive positions hit random places of
  random shards (one range request per record on cloud storage).
* :class:`BlockShuffleOrder`: locality-aware.  Every shard is cut into blocks of
  ``block_size`` consecutive records; the blocks of all shards are shuffled globally; then
  consecutive runs of ``window`` blocks in that shuffled order are merged into a window whose
  records are shuffled together.  A batch of ``b`` records therefore touches at most
  ``window`` blocks (about ``min(b, window)``), each one range read, instead of ``b`` ranges;
  the price is that records within ``block_size`` of each other in a file stay within
  ``window * block_size`` positions of each other in the epoch (they are correlated), and a
  batch draws from only ``window`` blocks.  ``window = 1`` shuffles only inside blocks;
  ``window * block_size >= n`` is a full shuffle.  ``tools/bench_shuffle.py --locality``
  measures both sides of the trade-off.

  Blocks never cross shard boundaries, with one exception: the shards' last partial blocks
  (each shard's ``count % block_size`` tail records) are pooled and cut into blocks of
  ``block_size`` pooled records, so a pooled block may be read as a few ranges (one per shard
  tail it spans).  That keeps all blocks but one of equal size, which is what makes position
  lookup O(1) instead of needing an O(number of blocks) table.
"""

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from .permutation import (
    DEFAULT_ROUNDS,
    FeistelPermutation,
    _walk,
    domain_shape,
    round_keys,
    splitmix64_np,
)

__all__ = ["BlockShuffleOrder", "GlobalShuffleOrder", "SequentialOrder"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


class EpochOrder(Protocol):
    """What a sampler needs of an order: its size and the position -> record index map."""

    n: int

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        """The record indices (int64, same shape) at epoch ``positions`` (in ``[0, n)``)."""
        ...


def _checked(positions: np.ndarray | Sequence[int], n: int) -> np.ndarray:
    """``positions`` as int64, or an IndexError if one lies outside ``[0, n)``."""
    q = np.asarray(positions, dtype=np.int64)
    if q.size and (int(q.min()) < 0 or int(q.max()) >= n):
        raise IndexError(f"positions must lie in [0, {n}); got min {q.min()} max {q.max()}")
    return q


class SequentialOrder:
    """Record ``i`` at epoch position ``i``.

    Args:
        n: The number of records.
    """

    def __init__(self, n: int) -> None:
        self.n = int(n)

    def __call__(self, positions: np.ndarray | Sequence[int]) -> np.ndarray:
        """The record index at each epoch position: the position itself.

        Args:
            positions: Epoch positions (integers of any shape) in ``[0, n)``.

        Returns:
            The positions as an int64 array of the same shape.

        Raises:
            IndexError: A position lies outside ``[0, n)``.
        """
        return _checked(positions, self.n)

    def positions_of(self, records: np.ndarray | Sequence[int]) -> np.ndarray:
        """The epoch position of each record (the inverse of the order): itself.

        Args:
            records: Record indices in ``[0, n)``.

        Returns:
            Their positions, int64, the shape of ``records``.

        Raises:
            IndexError: A record lies outside ``[0, n)``.
        """
        return _checked(records, self.n)


class GlobalShuffleOrder:
    """A seeded uniform-looking shuffle of all ``n`` records, different per epoch.

    A :class:`~ofindex.shuffle.permutation.FeistelPermutation` of ``range(n)`` (``perm``).

    Args:
        n: The number of records, ``1 <= n < 2**63``.
        seed: Any int; with ``epoch`` it selects the order.
        epoch: Any int; every epoch of a seed gets an independent-looking order.
        rounds: Feistel rounds (see :class:`~ofindex.shuffle.permutation.FeistelPermutation`).

    Raises:
        ValueError: ``n`` is outside ``[1, 2**63)`` or ``rounds < 2``.
    """

    def __init__(self, n: int, seed: int = 0, epoch: int = 0, rounds: int = DEFAULT_ROUNDS) -> None:
        self.n = int(n)
        self.perm = FeistelPermutation(n, seed, epoch, rounds=rounds)

    def __call__(self, positions: np.ndarray | Sequence[int]) -> np.ndarray:
        """The record index at each epoch position.

        Args:
            positions: Epoch positions (integers of any shape) in ``[0, n)``.

        Returns:
            An int64 array of record indices, the shape of ``positions``.

        Raises:
            IndexError: A position lies outside ``[0, n)``.
        """
        return self.perm(np.asarray(positions, dtype=np.int64))

    def positions_of(self, records: np.ndarray | Sequence[int]) -> np.ndarray:
        """The epoch position of each record (the inverse of the order).

        Args:
            records: Record indices in ``[0, n)``.

        Returns:
            Their positions, int64, the shape of ``records``.

        Raises:
            IndexError: A record lies outside ``[0, n)``.
        """
        return self.perm.inverse(_checked(records, self.n))


class BlockShuffleOrder:
    """Shuffle blocks of consecutive records globally, then records within windows of blocks.

    See the module docstring for the locality/mixing trade-off and how the shards' partial
    last blocks are pooled.

    Args:
        shard_sizes: The record count of each shard, in dataset order (the records of shard
            ``s`` are the global indices from ``sum(shard_sizes[:s])`` on). Empty shards are
            allowed.
        block_size: Consecutive records per block (blocks do not cross shard boundaries,
            except pooled tails).
        window: Blocks per shuffling window: a window's records are shuffled together.
        seed: Any int; with ``epoch`` it selects the order.
        epoch: Any int; every epoch of a seed gets an independent-looking order.
        rounds: Feistel rounds of the underlying permutations.

    Raises:
        ValueError: ``shard_sizes`` has a negative count or a total of 0, ``block_size`` or
            ``window`` is below 1, or ``rounds < 2``.
    """

    def __init__(
        self,
        shard_sizes: Sequence[int],
        block_size: int = 64,
        window: int = 16,
        seed: int = 0,
        epoch: int = 0,
        rounds: int = DEFAULT_ROUNDS,
    ) -> None:
        counts = np.asarray(shard_sizes, dtype=np.int64).reshape(-1)
        if counts.size == 0 or (counts < 0).any() or counts.sum() < 1:
            raise ValueError("shard_sizes must be non-negative counts with a positive total")
        if block_size < 1 or window < 1:
            raise ValueError(f"block_size and window must be >= 1, got {block_size}, {window}")
        bs = self.block_size = int(block_size)
        self.window = int(window)
        self.n = int(counts.sum())
        self._rec_start = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
        self._full = counts // bs
        self._full_cum = np.concatenate(([0], np.cumsum(self._full))).astype(np.int64)
        tails = counts - self._full * bs
        self._tail_cum = np.concatenate(([0], np.cumsum(tails))).astype(np.int64)
        self._nfull = int(self._full_cum[-1])
        pooled = int(self._tail_cum[-1])
        self.num_blocks = self._nfull + -(-pooled // bs)
        short = pooled % bs
        self._gap = bs - short if short else 0  # records missing from the one short block
        self._blocks = FeistelPermutation(self.num_blocks, seed, epoch, salt=1, rounds=rounds)
        # slot (position in the shuffled block sequence) of the short block, if any
        self._jstar = self._blocks.inverse(self.num_blocks - 1) if short else self.num_blocks
        self._wkeys = [np.uint64(k) for k in round_keys(seed, epoch, 2, rounds)]

    # -- slots: the shuffled sequence of blocks laid end to end -------------------------------
    def _slot_start(self, j: np.ndarray) -> np.ndarray:
        s = j * self.block_size
        if self._gap:
            s = s - np.where(j > self._jstar, self._gap, 0)
        return s

    def _slot_of(self, q: np.ndarray) -> np.ndarray:
        if not self._gap:
            return q // self.block_size
        edge = self._jstar * self.block_size + (self.block_size - self._gap)
        return np.where(q < edge, q, q + self._gap) // self.block_size

    def _record_of(self, block: np.ndarray, off: np.ndarray) -> np.ndarray:
        out = np.empty_like(block)
        full = block < self._nfull
        b, o = block[full], off[full]
        s = np.searchsorted(self._full_cum, b, side="right") - 1
        out[full] = self._rec_start[s] + (b - self._full_cum[s]) * self.block_size + o
        pooled = ~full
        if pooled.any():
            t = (block[pooled] - self._nfull) * self.block_size + off[pooled]
            s = np.searchsorted(self._tail_cum, t, side="right") - 1
            out[pooled] = (
                self._rec_start[s] + self._full[s] * self.block_size + (t - self._tail_cum[s])
            )
        return out

    def _window_perm(self, u: np.ndarray, k: np.ndarray, length: int,
                     inverse: bool = False) -> np.ndarray:
        """Per-window Feistel permutation of local offsets ``u`` in windows ``k`` of ``length``
        (or its inverse)."""
        ku = k.astype(np.uint64) * _GOLDEN
        keys = [splitmix64_np(ku ^ key) for key in self._wkeys]
        ra, rb = domain_shape(length)
        return _walk(u.astype(np.uint64), length, keys, ra, rb, inverse).view(np.int64)

    def _windows(self, q: np.ndarray, u: np.ndarray, inverse: bool) -> np.ndarray:
        """Offsets ``u`` of slot positions ``q`` moved by the permutation of their window."""
        w = self.window
        k = self._slot_of(q) // w
        first = k * w
        start = self._slot_start(first)
        length = self._slot_start(np.minimum(first + w, self.num_blocks)) - start
        v = np.empty_like(u)
        regular = length == w * self.block_size
        if regular.any():
            v[regular] = self._window_perm(u[regular], k[regular], w * self.block_size,
                                           inverse)
        if not regular.all():
            for kk in np.unique(k[~regular]):
                sel = k == kk
                v[sel] = self._window_perm(u[sel], k[sel], int(length[sel][0]), inverse)
        moved: np.ndarray = start + v
        return moved

    def _block_of(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The block of each record and its offset in it (the inverse of ``_record_of``)."""
        bs = self.block_size
        s = np.searchsorted(self._rec_start, r, side="right") - 1
        j = r - self._rec_start[s]
        full = j < self._full[s] * bs
        t = self._tail_cum[s] + (j - self._full[s] * bs)  # place among the pooled tails
        block = np.where(full, self._full_cum[s] + j // bs, self._nfull + t // bs)
        return block, np.where(full, j % bs, t % bs)

    def positions_of(self, records: np.ndarray | Sequence[int]) -> np.ndarray:
        """The epoch position of each record (the inverse of the order).

        Args:
            records: Record indices in ``[0, n)``.

        Returns:
            Their positions, int64, the shape of ``records``.

        Raises:
            IndexError: A record lies outside ``[0, n)``.
        """
        r = _checked(records, self.n).reshape(-1)
        block, off = self._block_of(r)
        slot = np.asarray(self._blocks.inverse(block), dtype=np.int64)
        q2 = self._slot_start(slot) + off
        start = self._slot_start((self._slot_of(q2) // self.window) * self.window)
        return self._windows(q2, q2 - start, inverse=True).reshape(np.shape(records))

    def __call__(self, positions: np.ndarray | Sequence[int]) -> np.ndarray:
        """The record index at each epoch position.

        Args:
            positions: Epoch positions (integers of any shape) in ``[0, n)``.

        Returns:
            An int64 array of record indices, the shape of ``positions``.

        Raises:
            IndexError: A position lies outside ``[0, n)``.
        """
        q = _checked(positions, self.n).reshape(-1)
        start = self._slot_start((self._slot_of(q) // self.window) * self.window)
        q2 = self._windows(q, q - start, inverse=False)
        slot = self._slot_of(q2)
        off = q2 - self._slot_start(slot)
        return self._record_of(self._blocks(slot), off).reshape(np.shape(positions))
