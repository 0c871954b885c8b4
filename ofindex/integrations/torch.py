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

* The sampler runs in the main process; workers receive batches of indices and fetch them with
  one ``__getitems__`` call each (one coalesced read plan per batch instead of 256 reads).
* With ``multiprocessing_context="spawn"`` the dataset, transform and collate function must be
  picklable module-level objects (ofindex datasets and these classes are).
* ``torchdata.stateful_dataloader.StatefulDataLoader`` checkpoints the samplers through their
  ``state_dict``/``load_state_dict`` (O(1), no replay).  Checkpoint every rank at the same step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

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


class TorchDataset(_tud.Dataset):
    """Map-style view of a record source: ``data[i] -> transform(source[i])``.

    ``__getitems__`` forwards a whole batch of indices to ``source.__getitems__`` when the source
    has it (torch's fetcher calls it with the batch of a batch sampler).
    """

    def __init__(self, source: Any, transform: Callable[[bytes], Any] | None = None) -> None:
        self.source = source
        self.transform = transform

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> Any:
        rec = self.source[int(index)]
        return rec if self.transform is None else self.transform(rec)

    def __getitems__(self, indices: list[int]) -> list[Any]:
        indices = [int(i) for i in indices]
        fetch = getattr(self.source, "__getitems__", None)
        recs = fetch(indices) if fetch is not None else [self.source[i] for i in indices]
        return recs if self.transform is None else [self.transform(r) for r in recs]

    def __repr__(self) -> str:
        return f"TorchDataset({self.source!r}, transform={self.transform!r})"


class SequentialSampler(_s.SequentialSampler, _tud.Sampler):
    __doc__ = _s.SequentialSampler.__doc__


class GlobalShuffleSampler(_s.GlobalShuffleSampler, _tud.Sampler):
    __doc__ = _s.GlobalShuffleSampler.__doc__


class BlockShuffleSampler(_s.BlockShuffleSampler, _tud.Sampler):
    __doc__ = _s.BlockShuffleSampler.__doc__


class BatchSampler(_s.BatchSampler, _tud.Sampler):
    __doc__ = _s.BatchSampler.__doc__


class ShuffledIterableDataset(_tud.IterableDataset):
    """Iterable-style alternative: each DataLoader worker reads its own strided share.

    The epoch order of ``sampler`` (its epoch, seed, rank and resume position) is split over
    the ``num_workers`` workers of this rank (see :meth:`Partition.split`): disjoint, complete,
    equal-sized shares.  Yields ``transform(record)``, fetched ``fetch_size`` at a time with
    ``__getitems__``.  Call ``sampler.set_epoch(e)`` before each epoch (and use
    ``persistent_workers=False`` so workers see it).
    """

    def __init__(self, source: Any, sampler: _s._EpochSampler, transform=None,
                 fetch_size: int = 64) -> None:  # fmt: skip
        self.data = TorchDataset(source, transform)
        self.sampler = sampler
        self.fetch_size = int(fetch_size)

    def __iter__(self) -> Iterator[Any]:
        info = _tud.get_worker_info()
        part = self.sampler.partition()
        if info is not None:
            part = part.split(info.num_workers, info.id)
        part.warn_if_padding()
        order = self.sampler.order()
        for j in range(0, len(part), self.fetch_size):
            idx = order(part.positions(j, j + self.fetch_size)).tolist()
            yield from self.data.__getitems__(idx)
