"""PyTorch integration: map-style Dataset, samplers and an iterable Dataset for ofindex datasets.

Any source with ``__len__`` and ``__getitem__`` (and optionally ``__getitems__``) works, e.g. a
dataset from ``ofindex.open(...)``::

    from torch.utils.data import DataLoader
    from ofindex.integrations.torch import TorchDataset, GlobalShuffleSampler

    data = TorchDataset(ofindex.open("gs://bucket/train-*.tfrecord"), transform=parse)
    sampler = GlobalShuffleSampler(data, seed=0)       # rank/world from torch.distributed
    loader = DataLoader(data, batch_size=256, sampler=sampler, num_workers=4)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for batch in loader: ...

* Every sampler takes the same first argument: an ofindex ``Dataset``, a :class:`TorchDataset`,
  any object with ``len()``, or a record count.  ``BlockShuffleSampler(data)`` keeps its blocks
  inside shards using the dataset's ``cumulative_counts`` (a :class:`TorchDataset` passes on
  its source's).
* The sampler runs in the main process; workers receive batches of indices and fetch them with
  one ``__getitems__`` call each (one coalesced read plan per batch instead of 256 reads).
* With ``multiprocessing_context="spawn"`` the dataset, transform and collate function must be
  picklable module-level objects (ofindex datasets and these classes are).
* ``torchdata.stateful_dataloader.StatefulDataLoader`` checkpoints the samplers through their
  ``state_dict``/``load_state_dict`` (O(1), no replay).  Checkpoint every rank at the same step.
"""

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch.utils.data as _tud

from ..shuffle import samplers as _s

__all__ = [
    "BatchSampler",
    "BlockShuffleSampler",
    "GlobalShuffleSampler",
    "SequentialSampler",
    "ShuffledIterableDataset",
    "TorchDataset",
]

#: The epoch samplers a :class:`ShuffledIterableDataset` can split over workers.
EpochSampler = _s.SequentialSampler | _s.GlobalShuffleSampler | _s.BlockShuffleSampler


class TorchDataset(_tud.Dataset[Any]):
    """Map-style view of a record source: ``data[i] -> transform(source[i])``.

    ``__getitems__`` forwards a whole batch of indices to ``source.__getitems__`` when the
    source has it (torch's fetcher calls it with the batch of a batch sampler).

    Args:
        source: The records: an ofindex ``Dataset`` or anything with ``__len__`` and
            ``__getitem__`` (and optionally ``__getitems__``).
        transform: Applied to every record (e.g. a :class:`ofindex.decode.Decoder`); must be
            picklable for DataLoader workers started with ``spawn``. ``None``: records as is.
    """

    def __init__(self, source: Any, transform: Callable[[Any], Any] | None = None) -> None:
        self.source = source
        self.transform = transform

    def __len__(self) -> int:
        """The number of records of the source."""
        return len(self.source)

    def __getitem__(self, index: int) -> Any:
        """One record, transformed.

        Args:
            index: The record number.

        Returns:
            ``transform(source[index])`` (the record itself without a transform).

        Raises:
            IndexError: ``index`` is out of range (raised by the source), or whatever the
                source or the transform raise for this record.
        """
        rec = self.source[int(index)]
        return rec if self.transform is None else self.transform(rec)

    def __getitems__(self, indices: list[int]) -> list[Any]:
        """A batch of records, transformed, read with one ``source.__getitems__`` call.

        Args:
            indices: Record numbers, in any order (duplicates allowed).

        Returns:
            The transformed records, in the order of ``indices``.

        Raises:
            IndexError: An index is out of range (raised by the source), or whatever the
                source or the transform raise.
        """
        indices = [int(i) for i in indices]
        fetch = getattr(self.source, "__getitems__", None)
        recs = fetch(indices) if fetch is not None else [self.source[i] for i in indices]
        return recs if self.transform is None else [self.transform(r) for r in recs]

    @property
    def cumulative_counts(self) -> np.ndarray:
        """The source's ``cumulative_counts`` (records in shards ``0..k``), for samplers.

        Raises:
            AttributeError: The source has no shard boundaries (``hasattr`` is then False).
        """
        counts: np.ndarray = self.source.cumulative_counts
        return counts

    def __repr__(self) -> str:
        return f"TorchDataset({self.source!r}, transform={self.transform!r})"


class SequentialSampler(_s.SequentialSampler, _tud.Sampler[int]):
    __doc__ = _s.SequentialSampler.__doc__


class GlobalShuffleSampler(_s.GlobalShuffleSampler, _tud.Sampler[int]):
    __doc__ = _s.GlobalShuffleSampler.__doc__


class BlockShuffleSampler(_s.BlockShuffleSampler, _tud.Sampler[int]):
    __doc__ = _s.BlockShuffleSampler.__doc__


class BatchSampler(_s.BatchSampler, _tud.Sampler[list[int]]):
    __doc__ = _s.BatchSampler.__doc__


class ShuffledIterableDataset(_tud.IterableDataset[Any]):
    """Iterable-style alternative: each DataLoader worker reads its own strided share.

    The epoch order of ``sampler`` (its epoch, seed, rank and resume position) is split over
    the ``num_workers`` workers of this rank (see :meth:`Partition.split`): disjoint, complete,
    equal-sized shares.  Call ``sampler.set_epoch(e)`` before each epoch (and use
    ``persistent_workers=False`` so workers see it).

    Args:
        source: The records: an ofindex ``Dataset`` or anything with ``__len__`` and
            ``__getitem__`` (and optionally ``__getitems__``).
        sampler: The sampler whose order is read (``SequentialSampler``,
            ``GlobalShuffleSampler`` or ``BlockShuffleSampler``).
        transform: Applied to every record; ``None``: records as is.
        fetch_size: Records read per ``__getitems__`` call.

    Raises:
        ValueError: ``fetch_size < 1``.
    """

    def __init__(self, source: Any, sampler: EpochSampler,
                 transform: Callable[[Any], Any] | None = None, fetch_size: int = 64) -> None:
        if int(fetch_size) < 1:
            raise ValueError(f"fetch_size must be >= 1, got {fetch_size}")
        self.data = TorchDataset(source, transform)
        self.sampler = sampler
        self.fetch_size = int(fetch_size)

    def __iter__(self) -> Iterator[Any]:
        """Iterate over this worker's share of the sampler's epoch (the whole rank's share
        outside a DataLoader worker).

        Warns with a ``UserWarning`` when the shares are padded with repeated records.

        Yields:
            ``transform(record)`` for each record of the share, in epoch order.
        """
        info = _tud.get_worker_info()
        part = self.sampler.partition()
        if info is not None:
            part = part.split(info.num_workers, info.id)
        part.warn_if_padding()
        order = self.sampler.order()
        for j in range(0, len(part), self.fetch_size):
            idx = order(part.positions(j, j + self.fetch_size)).tolist()
            yield from self.data.__getitems__(idx)
