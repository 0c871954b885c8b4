"""How well an order mixes: how far apart records that are neighbours in the files end up in
the epoch (the measure ``tools/bench_shuffle.py`` reports and ``ofindex plan`` weighs).

``mixing = mean |position(i + 1) - position(i)| / (n / 3)`` over the records ``i`` (``n / 3`` is
that mean for a uniform random order): 1.0 is as well mixed as a full shuffle, about 0 keeps
file neighbours together (a sequential read gives ``3 / n``). It is computed from the order
itself (its inverse, ``positions_of``) over every record, or over a uniform sample of records
for orders too large to walk (the sampled mean's standard error is given with it).

On data stored class by class (files sorted by label), two more measures of a delivered epoch
say what a training step sees (:func:`class_balance`): the distinct classes per batch and
the share of a batch taken by its two largest classes, and :func:`displacement`: how far
records moved from their place in the files, ``mean |position(i) - i| / (n / 3)`` (1.0 for a
uniform order, ``buffer / n`` or so for a shuffle buffer).
"""

import dataclasses
from typing import Protocol

import numpy as np

__all__ = ["ClassBalance", "Mixing", "class_balance", "displacement", "mixing_of_epoch",
           "neighbour_mixing"]

#: Records walked at once when every record is measured.
_CHUNK = 1 << 20


class InvertibleOrder(Protocol):
    """An order that can say where each record is visited."""

    n: int

    def positions_of(self, records: np.ndarray) -> np.ndarray: ...


@dataclasses.dataclass(frozen=True)
class Mixing:
    """The mixing of an order.

    Attributes:
        value: ``mean |position(i + 1) - position(i)| / (n / 3)``.
        stderr: Its standard error (0.0 when every record was measured).
        pairs: Neighbouring pairs measured.
    """

    value: float
    stderr: float
    pairs: int


def neighbour_mixing(order: InvertibleOrder, sample: int | None = None, seed: int = 0) -> Mixing:
    """Measure how far file neighbours are apart in ``order``'s epoch.

    Args:
        order: A :class:`~ofindex.shuffle.orders.GlobalShuffleOrder`,
            :class:`~ofindex.shuffle.orders.BlockShuffleOrder` or
            :class:`~ofindex.shuffle.orders.SequentialOrder` (anything with ``n`` and
            ``positions_of``).
        sample: Measure this many neighbouring pairs drawn uniformly; ``None`` (or at least
            ``n - 1``): every pair.
        seed: The sample's seed.

    Returns:
        The mixing (1.0 = as a full shuffle), with its standard error.

    Raises:
        ValueError: ``sample`` is below 1.
    """
    n = int(order.n)
    if n < 2:
        return Mixing(1.0, 0.0, 0)
    if sample is not None and sample < 1:
        raise ValueError(f"sample must be at least 1, not {sample}")
    scale = n / 3.0
    if sample is None or sample >= n - 1:
        total = 0.0
        for lo in range(0, n - 1, _CHUNK):
            pos = order.positions_of(np.arange(lo, min(n, lo + _CHUNK + 1), dtype=np.int64))
            total += float(np.abs(np.diff(pos)).sum())
        return Mixing(total / (n - 1) / scale, 0.0, n - 1)
    first = np.random.default_rng(seed).integers(0, n - 1, size=sample, dtype=np.int64)
    pos = order.positions_of(np.concatenate([first, first + 1]))
    gaps = np.abs(pos[sample:] - pos[:sample]).astype(np.float64) / scale
    stderr = float(gaps.std(ddof=1) / np.sqrt(sample)) if sample > 1 else float("inf")
    return Mixing(float(gaps.mean()), stderr, sample)


def mixing_of_epoch(records: np.ndarray) -> float:
    """:func:`neighbour_mixing` of an epoch already laid out: ``records[p]`` is the record at
    position ``p`` (every record once). No inverse is needed: one pass over the array.

    Args:
        records: A permutation of ``range(n)``.

    Returns:
        The mixing (1.0 = as a full shuffle).
    """
    n = len(records)
    if n < 2:
        return 1.0
    rank = np.empty(n, dtype=np.int64)
    rank[np.asarray(records, dtype=np.int64)] = np.arange(n, dtype=np.int64)
    return float(np.abs(np.diff(rank)).mean() / (n / 3.0))


@dataclasses.dataclass(frozen=True)
class ClassBalance:
    """What the batches of an epoch hold, class by class.

    Attributes:
        classes_per_batch: Mean number of distinct classes in a batch.
        top2_share: Mean share of a batch taken by its two most frequent classes.
        first_batch_classes: Distinct classes in the first batch.
        batches: Whole batches measured.
    """

    classes_per_batch: float
    top2_share: float
    first_batch_classes: int
    batches: int


def class_balance(labels: np.ndarray, batch_size: int) -> ClassBalance:
    """Measure the classes of each whole batch of an epoch's labels.

    Args:
        labels: The label of each delivered record, in delivery order (non-negative ints).
        batch_size: Records per batch; a last partial batch is left out.

    Returns:
        The :class:`ClassBalance`.

    Raises:
        ValueError: ``batch_size`` is below 1, fewer labels than one batch, or a negative
            label.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    values = np.asarray(labels, dtype=np.int64)
    batches = len(values) // batch_size
    if batches == 0:
        raise ValueError(f"{len(values)} labels hold no whole batch of {batch_size}")
    if values.min() < 0:
        raise ValueError("labels must be non-negative integers")
    grid = values[: batches * batch_size].reshape(batches, batch_size)
    width = int(values.max()) + 1
    counts = np.zeros((batches, width), dtype=np.int64)
    np.add.at(counts, (np.repeat(np.arange(batches), batch_size), grid.reshape(-1)), 1)
    distinct = (counts > 0).sum(axis=1)
    top2 = np.sort(counts, axis=1)[:, -2:].sum(axis=1) if width > 1 else counts[:, -1]
    return ClassBalance(float(distinct.mean()), float((top2 / batch_size).mean()),
                        int(distinct[0]), batches)


def displacement(records: np.ndarray) -> float:
    """How far the records of an epoch moved from their place in the files.

    Args:
        records: ``records[p]`` is the file position of the record delivered at ``p`` (a
            permutation of ``range(n)``).

    Returns:
        ``mean |p - records[p]| / (n / 3)``: 1.0 for a uniform order, 0 for the file order.
    """
    order = np.asarray(records, dtype=np.int64)
    n = len(order)
    if n < 2:
        return 0.0
    return float(np.abs(order - np.arange(n, dtype=np.int64)).mean() / (n / 3.0))
