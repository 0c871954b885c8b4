"""Which records make batch ``k`` of a run of globally shuffled epochs, for the integrations
whose position is a batch count (TensorFlow, Keras): batch ``step`` is batch
``step % batches_per_epoch`` of epoch ``step // batches_per_epoch``. The order and the rank
split are those of :class:`ofindex.shuffle.GlobalShuffleSampler` (a pure function of seed,
epoch and position), so a saved step resumes exactly."""

from __future__ import annotations

import threading

import numpy as np

from ..shuffle import GlobalShuffleSampler, SequentialSampler
from ..shuffle.orders import EpochOrder


class BatchPlan:
    """The record numbers of every batch of this rank, epoch after epoch.

    Args:
        records: The number of records of the dataset.
        batch_size: Records per batch.
        seed: Selects the shuffle, with the epoch.
        shuffle: ``False`` keeps the dataset order (every epoch the same).
        drop_remainder: Drop each epoch's last batch when it is short (and the epoch's last
            positions that do not split evenly over the ranks).
        num_replicas: The number of ranks sharing each epoch.
        rank: This rank: a strided share of every epoch, disjoint from the others'.

    Raises:
        ValueError: ``batch_size < 1``, no records, ``num_replicas``/``rank`` invalid, or no
            whole batch per epoch with ``drop_remainder``.
    """

    def __init__(self, records: int, batch_size: int, *, seed: int = 0, shuffle: bool = True,
                 drop_remainder: bool = False, num_replicas: int = 1, rank: int = 0) -> None:
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        sampler_type = GlobalShuffleSampler if shuffle else SequentialSampler
        self.sampler = sampler_type(int(records), num_replicas=num_replicas, rank=rank,
                                    drop_last=drop_remainder, seed=seed)
        self.batch_size = int(batch_size)
        self.drop_remainder = bool(drop_remainder)
        share = len(self.sampler)
        per_epoch = share // self.batch_size if self.drop_remainder else -(-share //
                                                                           self.batch_size)
        if per_epoch < 1:
            raise ValueError(f"no whole batch of {self.batch_size} in this rank's {share} "
                             "records per epoch: use a smaller batch_size or "
                             "drop_remainder=False")
        self.batches_per_epoch = per_epoch
        self._partition = self.sampler.partition(0)
        self._lock = threading.Lock()
        self._cached: tuple[int, EpochOrder] | None = None

    def __len__(self) -> int:
        """Batches per epoch (of this rank's share)."""
        return self.batches_per_epoch

    def _order(self, epoch: int) -> EpochOrder:
        with self._lock:  # batches are read from several threads at once
            if self._cached is None or self._cached[0] != epoch:
                self._cached = (epoch, self.sampler.order_of(epoch))
            return self._cached[1]

    def indices(self, step: int) -> np.ndarray:
        """The global record numbers of batch ``step``.

        Args:
            step: Batch ``step % len(self)`` of epoch ``step // len(self)``.

        Returns:
            An int64 array of record numbers (``batch_size`` of them, fewer for an epoch's
            last batch without ``drop_remainder``).

        Raises:
            IndexError: ``step`` is negative.
        """
        if step < 0:
            raise IndexError(f"batch {step} is negative")
        epoch, k = divmod(int(step), self.batches_per_epoch)
        low = k * self.batch_size
        high = min(low + self.batch_size, len(self._partition))
        picked: np.ndarray = self._order(epoch)(self._partition.positions(low, high))
        return picked

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["_lock"], state["_cached"] = None, None
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
