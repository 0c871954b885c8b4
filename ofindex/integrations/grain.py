"""Grain integration: a ``grain.MapDataset`` whose elements are whole decoded batches.

Element ``k`` of :class:`GrainBatches` is batch ``k`` of a globally shuffled epoch (batch
``k - len`` of the next epoch, and so on): its records are read with one ``__getitems__`` call
and decoded with one ``BatchDecoder`` call into numpy arrays. The order is the same Feistel
shuffle as :class:`ofindex.shuffle.GlobalShuffleSampler` (a pure function of seed, epoch and
position), so Grain's checkpoints, which record the position, resume exactly::

    import grain
    from ofindex.integrations.grain import GrainBatches

    batches = GrainBatches(ofindex.open("data/"), 256, BatchDecoder(spec), seed=0)
    loader = batches.repeat(epochs).to_iter_dataset().mp_prefetch(
        grain.MultiprocessingOptions(num_workers=2))
    for batch in loader: ...
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import missing_extra

try:
    import grain
except ImportError as _exc:  # without the extra: say which one to install
    raise missing_extra("ofindex.integrations.grain", "grain", _exc) from _exc

from ..shuffle import GlobalShuffleSampler, SequentialSampler
from ._fetch import BatchFetch, RecordSource

__all__ = ["GrainBatches"]


class GrainBatches(grain.MapDataset):  # type: ignore[misc]
    """Decoded batches of a globally shuffled epoch, as a Grain ``MapDataset``.

    Args:
        source: The records: an ofindex ``Dataset`` or anything with ``__len__`` and
            ``__getitems__`` (or ``__getitem__``).
        batch_size: Records per batch.
        decoder: Called once per batch with its list of records, e.g.
            :class:`ofindex.decode.BatchDecoder`; ``None``: the batch is the list of records.
        seed: Selects the shuffle, with the epoch (element ``k`` belongs to epoch
            ``k // len(self)``).
        shuffle: ``False`` reads the records in dataset order.
        drop_remainder: Drop the last batch of an epoch when it is short.
        num_replicas: The number of ranks (hosts) sharing each epoch.
        rank: This rank: it reads a strided share of every epoch, disjoint from the others.
        pack_bytes: Give ``bytes`` features (e.g. encoded images) as
            ``Ragged(values, row_lengths)``: one ``uint8`` array with the values back to back,
            which Grain's worker processes pass on in shared memory, instead of an array of
            ``bytes`` objects, which they must pickle.

    Raises:
        ValueError: ``batch_size < 1``, the source is empty, or ``num_replicas``/``rank`` are
            invalid.
    """

    def __init__(self, source: RecordSource, batch_size: int,
                 decoder: Callable[..., Any] | None = None,
                 *, seed: int = 0, shuffle: bool = True, drop_remainder: bool = False,
                 num_replicas: int = 1, rank: int = 0, pack_bytes: bool = False) -> None:
        super().__init__()
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self._source = source
        self._batch_size = int(batch_size)
        self._fetch = BatchFetch(source, decoder, bool(pack_bytes))
        sampler_type = GlobalShuffleSampler if shuffle else SequentialSampler
        self._sampler = sampler_type(len(source), num_replicas=num_replicas, rank=rank,
                                     drop_last=drop_remainder, seed=seed)
        self._drop = bool(drop_remainder)
        share = len(self._sampler)
        self._len = share // self._batch_size if self._drop else -(-share // self._batch_size)
        self._epoch = -1
        self._order: Any = None

    def __len__(self) -> int:
        """Batches per epoch (of this rank's share)."""
        return self._len

    def indices(self, index: int) -> np.ndarray:
        """The global record numbers of element ``index``.

        Args:
            index: The element: batch ``index % len(self)`` of epoch ``index // len(self)``.

        Returns:
            An int64 array of record numbers.

        Raises:
            IndexError: ``index`` is negative.
        """
        if index < 0:
            raise IndexError(f"batch index {index} is negative")
        epoch, k = divmod(int(index), self._len)
        if epoch != self._epoch:
            self._sampler.set_epoch(epoch)
            self._order, self._epoch = self._sampler.order(), epoch
        part = self._sampler.partition()
        lo = k * self._batch_size
        picked: np.ndarray = self._order(part.positions(lo, min(lo + self._batch_size,
                                                                len(part))))
        return picked

    def __getitem__(self, index: Any) -> Any:
        """One decoded batch (a slice gives a sliced dataset, as Grain expects).

        Args:
            index: The element number (see :meth:`indices`), or a slice.

        Returns:
            The decoder's batch (``{name: numpy array | Ragged}``), or the list of records
            without a decoder.

        Raises:
            IndexError: ``index`` is negative, or whatever the source or decoder raise.
        """
        if isinstance(index, slice):
            return self.slice(index)
        return self._fetch(self.indices(index))[0]

    def __str__(self) -> str:
        return (f"GrainBatches(batch_size={self._batch_size}, batches={self._len}, "
                f"source={self._source!r})")
