"""The definition of a weighted mixture of datasets: which record of which source fills each
slot of each batch.  Pure functions of (sizes, weights, batch size, seed); O(1) memory.

Sources ``s = 0 .. S-1`` have ``n_s >= 1`` records and weights ``w_s > 0``; batches hold
``B`` records.  Mixture batches are numbered ``g = 0, 1, 2, ...`` over all mixture epochs.

1. **Counts.**  *Exact* mode: every batch holds ``c_s`` records of source ``s``, the same in
   every batch: ``q_s = B * w_s / sum(w)`` (computed exactly, as fractions of the weights'
   binary values), ``c_s = floor(q_s)``, and the ``B - sum(c_s)`` records left over go one
   each to the sources with the largest remainders ``q_s - c_s`` (ties: the lower source
   number first; Hamilton's rule).  Weights 0.7 / 0.3 and ``B = 256`` give 179 / 77.
   *Sampled* mode: slot ``u`` of batch ``g`` draws its source with probabilities ``w / sum(w)``:
   ``h = splitmix64(key ^ (g * B + u))`` with ``key = splitmix64(seed ^ MIX_SALT)``, and the
   source is the first ``s`` with ``h < T_s``, ``T_s = floor(2**64 * sum(w[:s+1]) / sum(w))``
   (``T_{S-1} = 2**64``); ``c_s(g)`` counts the slots of batch ``g`` drawn by ``s``.
2. **Streams.**  Each source is an endless stream of its records: stream item ``k`` of source
   ``s`` is record ``perm(k mod n_s)`` of the source, where ``perm`` is
   ``FeistelPermutation(n_s, seed, epoch=k div n_s, salt=SOURCE_SALT + s)``: each source
   epoch is a new global shuffle, and a source that runs out restarts on its own next epoch
   inside the batch where it runs out.
3. **Batches.**  Batch ``g`` takes the next ``c_s(g)`` stream items of every source, source 0
   first: ``[source 0's items K_0(g) .. K_0(g)+c_0(g)-1][source 1's items ...]...``, where
   ``K_s(g) = K_s(g0) + sum(c_s(h) for g0 <= h < g)`` and ``(g0, K(g0))`` is where the stream
   offsets were last set (``(0, 0...)`` at the start; a checkpoint loaded with new weights
   keeps its offsets, so no record of the current source epochs is repeated).  A record is
   named by its *global index* ``offset_s + record`` with ``offset_s = sum(n[:s])`` (the
   index of the sources read one after the other).

Within a batch the order is by source (a batch is a set for training; readers get each
source's records together).
"""

from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from .permutation import DEFAULT_ROUNDS, FeistelPermutation, splitmix64, splitmix64_np

__all__ = ["MIX_SALT", "SOURCE_SALT", "MixturePlan", "apportion"]

#: Salt of the source streams' permutations: source ``s`` uses ``SOURCE_SALT + s``.
SOURCE_SALT = 0x6D69780000
#: Salt of the sampled mode's slot draws.
MIX_SALT = 0x6D69782D73
_TWO64 = 1 << 64


def apportion(weights: Sequence[float], batch_size: int) -> list[int]:
    """Exact per-batch counts for ``weights`` (Hamilton's largest-remainder rule).

    Args:
        weights: Positive weights, one per source (any scale).
        batch_size: Records per batch.

    Returns:
        ``c_s`` per source, summing to ``batch_size``.

    Raises:
        ValueError: A weight is not a positive finite number, or ``batch_size < 1``.
    """
    exact = _fractions(weights)
    if int(batch_size) < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    total = sum(exact)
    quotas = [batch_size * w / total for w in exact]
    counts = [int(q) for q in quotas]  # floor: the quotas are non-negative
    left = batch_size - sum(counts)
    by_remainder = sorted(range(len(quotas)), key=lambda s: (-(quotas[s] - counts[s]), s))
    for s in by_remainder[:left]:
        counts[s] += 1
    return counts


def _fractions(weights: Sequence[float]) -> list[Fraction]:
    out = []
    for w in weights:
        try:
            f = Fraction(w)
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"weights must be positive finite numbers, got {list(weights)}") \
                from None
        if f <= 0:
            raise ValueError(f"weights must be positive finite numbers, got {list(weights)}")
        out.append(f)
    if not out:
        raise ValueError("a mixture needs at least one source")
    return out


class MixturePlan:
    """The mixture of the module docstring: batch counts and stream records.

    Args:
        sizes: Records per source (each >= 1).
        weights: Positive weights, one per source.
        batch_size: Records per batch.
        seed: Selects the source orders (and the draws in sampled mode).
        sampled: Draw each slot's source at random instead of exact per-batch counts.
        rounds: Feistel rounds of the source permutations.

    Raises:
        ValueError: The sizes and weights differ in number, a size is below 1, a weight is
            not positive, or ``batch_size < 1``.
    """

    def __init__(self, sizes: Sequence[int], weights: Sequence[float], batch_size: int,
                 seed: int = 0, sampled: bool = False, rounds: int = DEFAULT_ROUNDS) -> None:
        self.sizes = [int(n) for n in sizes]
        if len(self.sizes) != len(weights):
            raise ValueError(f"{len(self.sizes)} sources but {len(weights)} weights")
        if any(n < 1 for n in self.sizes):
            raise ValueError(f"every source needs records, got sizes {self.sizes}")
        self.weights = [float(w) for w in weights]
        self.batch_size, self.seed, self.sampled = int(batch_size), int(seed), bool(sampled)
        self.rounds = int(rounds)
        self.counts = apportion(self.weights, self.batch_size)
        exact = _fractions(self.weights)
        total, running, limits = sum(exact), Fraction(0), []
        for w in exact:
            running += w
            limits.append(min(_TWO64, int(running / total * _TWO64)))
        limits[-1] = _TWO64
        self._limits = np.array([min(t, _TWO64 - 1) for t in limits], dtype=np.uint64)
        self._key = np.uint64(splitmix64((self.seed ^ MIX_SALT) & (_TWO64 - 1)))
        self.offsets = np.concatenate(([0], np.cumsum(self.sizes)[:-1])).astype(np.int64)
        self._perms: dict[tuple[int, int], FeistelPermutation] = {}

    def slot_sources(self, batch: int) -> np.ndarray:
        """Sampled mode: the source of each slot of a batch.

        Args:
            batch: The mixture batch number ``g``.

        Returns:
            An int64 array of ``batch_size`` source numbers.
        """
        slots = np.arange(self.batch_size, dtype=np.uint64) + np.uint64(batch * self.batch_size)
        draws = splitmix64_np(slots ^ self._key)
        # the last limit stands for 2**64: every draw falls below it
        return np.minimum(np.searchsorted(self._limits, draws, side="right"),
                          len(self.sizes) - 1).astype(np.int64)

    def batch_counts(self, batch: int) -> np.ndarray:
        """Records of each source in a batch.

        Args:
            batch: The mixture batch number ``g``.

        Returns:
            An int64 array of counts per source, summing to ``batch_size``.
        """
        if not self.sampled:
            return np.asarray(self.counts, dtype=np.int64)
        return np.bincount(self.slot_sources(batch), minlength=len(self.sizes)).astype(np.int64)

    def counts_between(self, first: int, end: int) -> np.ndarray:
        """Records of each source in batches ``first .. end-1`` (negative if ``end < first``).

        Args:
            first: The first batch.
            end: The end batch (exclusive).

        Returns:
            An int64 array of counts per source.
        """
        if not self.sampled:
            return np.asarray(self.counts, dtype=np.int64) * (end - first)
        lo, hi, sign = (first, end, 1) if end >= first else (end, first, -1)
        total = np.zeros(len(self.sizes), dtype=np.int64)
        for g in range(lo, hi):
            total += self.batch_counts(g)
        return sign * total

    def stream(self, source: int, items: np.ndarray) -> np.ndarray:
        """Records (within the source) of stream items of one source.

        Args:
            source: The source number.
            items: Stream item numbers ``k`` (int64, any values: ``k div n`` is the epoch).

        Returns:
            The source's record numbers, an int64 array like ``items``.
        """
        n = self.sizes[source]
        epochs, positions = np.divmod(items.astype(np.int64), n)
        out = np.empty_like(positions)
        for epoch in np.unique(epochs).tolist():
            sel = epochs == epoch
            out[sel] = self._perm(source, int(epoch))(positions[sel])
        return out

    def _perm(self, source: int, epoch: int) -> FeistelPermutation:
        key = (source, epoch)
        perm = self._perms.get(key)
        if perm is None:
            if len(self._perms) > 4 * len(self.sizes):
                self._perms.clear()
            perm = self._perms[key] = FeistelPermutation(
                self.sizes[source], self.seed, epoch, salt=SOURCE_SALT + source,
                rounds=self.rounds)
        return perm

    def batch(self, batch: int, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The records of one batch.

        Args:
            batch: The mixture batch number ``g``.
            starts: ``K_s(g)``: the first stream item of each source in this batch.

        Returns:
            ``(sources, indices)``: the source of each record and its global index
            (``offset_s + record``), int64 arrays of ``batch_size``, source 0's first.
        """
        sources, indices = self.batches(np.array([batch]), np.asarray(starts).reshape(1, -1))
        return sources[0], indices[0]

    def batches(self, batches: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The records of several batches at once (one permutation call per source and
        source epoch for all of them).

        Args:
            batches: Mixture batch numbers, shape ``(m,)``.
            starts: ``K_s(g)`` of each batch, shape ``(m, S)``.

        Returns:
            ``(sources, indices)``, int64 arrays of shape ``(m, batch_size)``: each row as in
            :meth:`batch`.
        """
        rows = len(batches)
        counts = (np.broadcast_to(np.asarray(self.counts, dtype=np.int64),
                                  (rows, len(self.sizes))) if not self.sampled
                  else np.stack([self.batch_counts(int(g)) for g in batches]))
        columns = np.cumsum(counts, axis=1) - counts  # where each source's run starts in a row
        sources = np.empty((rows, self.batch_size), dtype=np.int64)
        indices = np.empty((rows, self.batch_size), dtype=np.int64)
        row_of = np.arange(rows, dtype=np.int64)
        for s in range(len(self.sizes)):
            per_row = counts[:, s]
            total = int(per_row.sum())
            if not total:
                continue
            first = np.repeat(np.cumsum(per_row) - per_row, per_row)
            within = np.arange(total, dtype=np.int64) - first
            row = np.repeat(row_of, per_row)
            column = np.repeat(columns[:, s], per_row) + within
            items = np.repeat(np.asarray(starts, dtype=np.int64)[:, s], per_row) + within
            sources[row, column] = s
            indices[row, column] = self.stream(s, items) + self.offsets[s]
        return sources, indices
