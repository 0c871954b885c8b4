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
* Checkpoints: wrap the loader, ``loader = ResumableLoader(DataLoader(...))``, and save
  ``loader.state_dict()``: it counts the batches the training loop received, so it is exact
  whatever the workers prefetch, and resumes with any ``num_workers`` or number of ranks.
  ``torchdata.stateful_dataloader.StatefulDataLoader`` checkpoints the samplers through their
  ``state_dict``/``load_state_dict`` too (same ``num_workers`` only).  A sampler's own
  ``state_dict()`` raises while a DataLoader with workers holds batches the loop has not
  received.  Checkpoint every rank at the same step.
* :class:`MixtureSampler` and :class:`MixtureBatches` mix several datasets with weights.

The fastest way to train: :class:`TensorBatches`, whose items are whole decoded batches.  The
sampler yields batches of indices; each worker reads a batch with one ``__getitems__`` and
decodes it with one ``BatchDecoder`` call into tensors (no per-record collate)::

    data = TensorBatches(ofindex.open("data/"), BatchDecoder(spec))
    sampler = BatchSampler(GlobalShuffleSampler(data, seed=0), 256, drop_last=True)
    loader = DataLoader(data, sampler=sampler, batch_size=None, num_workers=2)
"""

import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..errors import missing_extra

try:
    import torch
    import torch.utils.data as _tud
except ImportError as _exc:  # without the extra: say which one to install
    raise missing_extra("ofindex.integrations.torch", "torch", _exc) from _exc

from ..decode import Ragged
from ..shuffle import mixing as _m
from ..shuffle import samplers as _s
from ..shuffle.progress import ResumableLoader
from ._fetch import BatchFetch, Layout, RecordSource, bound_decoder, shard_counts
from ._mixed_source import MixedSource
from ._shared_blocks import lend, shared_bytes
from ._shared_ring import carve

__all__ = [
    "BatchSampler",
    "BlockShuffleSampler",
    "GlobalShuffleSampler",
    "MixtureBatches",
    "MixtureSampler",
    "RaggedTensors",
    "ResumableLoader",
    "SequentialSampler",
    "ShuffledIterableDataset",
    "TensorBatches",
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
        transform: Applied to every record (e.g. a :class:`ofindex.decode.Decoder`, which,
            made without ``kind``, decodes what the source's files hold: OFRecords for an
            OFRecord dataset); must be picklable for DataLoader workers started with
            ``spawn``. ``None``: records as is.
    """

    def __init__(self, source: RecordSource, transform: Callable[[Any], Any] | None = None) -> None:
        self.source = source
        self.transform = bound_decoder(transform, source)

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
        return shard_counts(self.source)

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


class MixtureSampler(_m.MixtureSampler, _tud.Sampler[list[int]]):
    __doc__ = _m.MixtureSampler.__doc__


class ShuffledIterableDataset(_tud.IterableDataset[Any]):
    """Iterable-style alternative: each DataLoader worker reads its own strided share.

    The epoch order of ``sampler`` (its epoch, seed, rank and resume position) is split over
    the ``num_workers`` workers of this rank (see :meth:`Partition.split`): disjoint, complete,
    equal-sized shares.  Call ``sampler.set_epoch(e)`` before each epoch (and use
    ``persistent_workers=False`` so workers see it).  It has no checkpoint of what the loop
    consumed: for exact resume use a map-style dataset with a sampler (or
    :class:`TensorBatches` with a :class:`BatchSampler`) and :class:`ResumableLoader`.

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

    def __init__(self, source: RecordSource, sampler: EpochSampler,
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


class RaggedTensors(NamedTuple):
    """A ragged feature of a batch (``VarLen``, or a ``bytes`` feature with ``pack_bytes``):
    every record's values back to back, and how many belong to each record.

    A named tuple, so that it arrives as the same type from a DataLoader worker as from
    ``data[indices]`` in the main process (DataLoader turns plain tuples into lists).

    Attributes:
        values: The values of all records, one after another (a ``uint8`` tensor of the
            bytes for ``pack_bytes``; a numpy array of ``bytes`` objects otherwise).
        row_lengths: ``int64`` tensor: the number of values (bytes) of each record.
    """

    values: Any
    row_lengths: Any


def _tensors(value: Any) -> Any:
    """Decoded numpy arrays as tensors sharing their memory (``torch.from_numpy``); ragged
    features as :class:`RaggedTensors`; ``bytes`` arrays (object dtype) stay numpy."""
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return value
        return torch.from_numpy(value if value.flags.writeable else value.copy())
    if isinstance(value, Ragged):
        return RaggedTensors(_tensors(value.values), torch.from_numpy(value.row_lengths))
    if isinstance(value, dict):
        return {k: _tensors(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_tensors(v) for v in value)
    return value


def _arena(layout: Layout, pinned: bool) -> dict[str, torch.Tensor]:
    """Uninitialised tensors for a batch's outputs, all views of one block of memory: a block
    of the worker's shared-memory ring (a DataLoader worker then hands the whole batch to the
    main process as a reference to the block, without a copy; blocks are reused once nothing
    refers to them: :mod:`._shared_blocks`) or page-locked memory (fast, asynchronous copies
    to the GPU)."""
    total, ranges = carve(layout)
    block = (torch.empty(total, dtype=torch.uint8, pin_memory=True) if pinned
             else shared_bytes(total))
    return {name: lend(block[ranges[name]], dtype, shape)
            for name, (shape, dtype) in layout.items()}


def _shared(layout: Layout) -> dict[str, torch.Tensor]:
    return _arena(layout, pinned=False)


def _pinned(layout: Layout) -> dict[str, torch.Tensor]:
    return _arena(layout, pinned=True)


class TensorBatches(_tud.Dataset[Any]):
    """Map-style dataset whose items are whole decoded batches of tensors.

    ``data[[i, j, ...]]`` reads the records with one ``source.__getitems__`` call, decodes
    them with one ``decoder`` call and returns tensors without copies (``torch.from_numpy``).
    Use it with a batch sampler as the ``DataLoader``'s ``sampler`` and ``batch_size=None``,
    so that each worker fetches one whole batch per step::

        data = TensorBatches(ds, BatchDecoder(spec))
        sampler = BatchSampler(GlobalShuffleSampler(data, seed=0), 256, drop_last=True)
        loader = DataLoader(data, sampler=sampler, batch_size=None, num_workers=2)

    Inside a DataLoader worker, numeric ``FixedLen`` features are decoded straight into
    shared-memory tensors, which reach the main process without a copy. In the main process
    (``num_workers=0``) they are the decoder's own arrays: big ones live on recycled memory
    (:func:`ofindex.decode.memory_pool`), reused only once no array or tensor refers to it,
    so batches you keep are never overwritten. ``StatefulDataLoader`` resume, ranks and
    ``set_epoch`` come from the sampler.

    Args:
        source: The records: an ofindex ``Dataset`` or anything with ``__len__`` and
            ``__getitems__`` (or ``__getitem__``).
        decoder: Called once per batch with its list of records, e.g.
            :class:`ofindex.decode.BatchDecoder`; ``None``: the batch is the list of records.
        pin_memory: Decode numeric ``FixedLen`` features straight into page-locked memory
            (needs CUDA in the process that decodes: ``num_workers=0``, or workers started
            with ``spawn``); without CUDA this warns and is ignored. ``DataLoader``'s own
            ``pin_memory=True`` also works (it copies each batch once, in the main process).
        pack_bytes: Give ``bytes`` features (e.g. encoded images) as
            :class:`RaggedTensors` ``(values, row_lengths)``: one ``uint8`` tensor with the
            values back to back (in shared memory in a worker) and their lengths, instead
            of a numpy array of ``bytes`` objects, which a worker must pickle to the main
            process. Record ``k``'s value is
            ``values[offsets[k]:offsets[k + 1]]`` with ``offsets`` the cumulative lengths.
        images: ``{feature: (height, width)}``: ``bytes`` features holding JPEG or PNG
            images (``ofindex.decode.images.FORMATS``), decoded to RGB and resized (antialiased
            bilinear) on every core without the GIL, straight
            into the batch's memory (shared memory in a worker, page-locked with
            ``pin_memory``): a ``uint8`` tensor ``(batch, height, width, 3)``
            (:func:`ofindex.decode.images.decode_images`; ``None`` instead of a size: no
            resize, the images must share one size). Needs ``pip install 'ofindex[images]'``.

    Raises:
        ValueError: ``images`` names a feature the decoder does not give as
            ``FixedLen((), "bytes")``.
    """

    def __init__(self, source: RecordSource, decoder: Callable[..., Any] | None = None, *,
                 pin_memory: bool = False, pack_bytes: bool = False,
                 images: Mapping[str, tuple[int, int] | None] | None = None) -> None:
        self.source = source
        self.pin_memory = bool(pin_memory)
        self._fetch = BatchFetch(source, decoder, bool(pack_bytes), images)
        self.decoder = self._fetch.decoder  # with the source's record kind (bound_decoder)

    def __len__(self) -> int:
        """The number of records of the source (the sampler makes the batches)."""
        return len(self.source)

    def __getitem__(self, indices: Sequence[int] | np.ndarray | int) -> Any:
        """One decoded batch.

        Args:
            indices: Global record numbers, in any order (one number: a batch of one).

        Returns:
            The decoder's batch with arrays as tensors (``{name: tensor}``; ragged features
            as :class:`RaggedTensors`; ``bytes`` features stay numpy object arrays), or
            the list of records without a decoder.

        Raises:
            IndexError: An index is out of range (raised by the source), or whatever the
                source or the decoder raise (a corrupt record, a record that does not
                decode).
        """
        allocate = None
        if self.pin_memory:
            if torch.cuda.is_available():
                allocate = _pinned
            else:
                warnings.warn("TensorBatches(pin_memory=True): CUDA is not available, so "
                              "batches stay in ordinary memory", stacklevel=2)
                self.pin_memory = False
        if allocate is None and _tud.get_worker_info() is not None:
            allocate = _shared
        batch, made = self._fetch(indices, allocate)
        if self.decoder is None:
            return batch
        out = _tensors(batch)
        if made and isinstance(out, dict):  # the allocated tensors themselves (shared memory)
            for k, v in made.items():
                if k in out:
                    out[k] = out[k]._replace(values=v) if isinstance(
                        out[k], RaggedTensors) else v
        return out

    @property
    def cumulative_counts(self) -> np.ndarray:
        """The source's ``cumulative_counts`` (records in shards ``0..k``), for samplers.

        Raises:
            AttributeError: The source has no shard boundaries.
        """
        return shard_counts(self.source)

    def __repr__(self) -> str:
        return f"TensorBatches({self.source!r}, decoder={self.decoder!r})"


class MixtureBatches(TensorBatches):
    """Decoded batches of a weighted mixture, with the source of each record.

    The dataset of a :class:`MixtureSampler` over the same sources (its indices are the
    sources' records one after the other, :class:`~ofindex.integrations._mixed_source.
    MixedSource`)::

        data = MixtureBatches([a, b, c], BatchDecoder(spec))
        sampler = MixtureSampler([a, b, c], [0.5, 0.3, 0.2], 256, seed=0)
        loader = ResumableLoader(DataLoader(data, sampler=sampler, batch_size=None))

    Args:
        sources: The datasets mixed (any record sources; local, remote, compressed).
        decoder: One decoder for all sources (a common spec), called once per batch, or a
            list of one decoder per source (specs that differ), each called with its
            source's records of the batch; ``None``: records as they are.
        pin_memory: As for :class:`TensorBatches`.
        pack_bytes: As for :class:`TensorBatches`.

    Raises:
        ValueError: No source is given, or a list of decoders does not have one per source.
    """

    def __init__(self, sources: Sequence[RecordSource],
                 decoder: Callable[..., Any] | Sequence[Callable[..., Any]] | None = None, *,
                 pin_memory: bool = False, pack_bytes: bool = False) -> None:
        mixed = MixedSource(sources)
        self.parts: list[TensorBatches] | None = None
        common: Callable[..., Any] | None = None
        if isinstance(decoder, Sequence):
            if len(decoder) != len(mixed.sources):
                raise ValueError(f"{len(decoder)} decoders for {len(mixed.sources)} sources: "
                                 "give one decoder per source, or one for all")
            self.parts = [TensorBatches(src, dec, pin_memory=pin_memory, pack_bytes=pack_bytes)
                          for src, dec in zip(mixed.sources, decoder, strict=True)]
        else:
            common = decoder
        # one batch read of the sources' concatenation when they read alike (the indices
        # are checked against the mixture first, by source_of)
        reader: RecordSource = mixed.joined if mixed.joined is not None else mixed
        super().__init__(reader, common, pin_memory=pin_memory, pack_bytes=pack_bytes)
        self.mixed = mixed

    def __getitem__(self, indices: Sequence[int] | np.ndarray | int) -> Any:
        """One decoded batch and the source of each of its records.

        Args:
            indices: Global indices (``offset_s + record``), e.g. a batch of a
                :class:`MixtureSampler`.

        Returns:
            With one decoder, its batch (``{name: tensor}``) plus ``"source"``: an int64
            tensor of each record's source; with one decoder per source,
            ``{"source": ..., "parts": [batch of source 0's records, ...]}`` (a part is
            ``None`` for a source absent from the batch; the records of each part are in
            the order of ``indices``); without a decoder,
            ``{"records": [...], "source": ...}``.

        Raises:
            IndexError: An index is outside the sources' records, or whatever the sources or
                decoders raise.
        """
        picked = [int(indices)] if isinstance(indices, (int, np.integer)) else indices
        source = torch.from_numpy(self.mixed.source_of(picked))
        if self.parts is not None:
            parts: list[Any] = [None] * len(self.parts)
            for s, local, _ in self.mixed.split(picked):
                parts[s] = self.parts[s][local]
            return {"source": source, "parts": parts}
        batch = super().__getitem__(picked)
        if isinstance(batch, dict):
            return {**batch, "source": source}
        return {"records": batch, "source": source}

    def __repr__(self) -> str:
        return f"MixtureBatches({self.mixed!r}, decoder={self.decoder!r})"
