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

Checkpoints that survive a change of the number of hosts or workers: wrap the iterator,
``loader = ResumableLoader(batches.until_epoch(2).to_iter_dataset().mp_prefetch(...),
tracker=batches)``, save ``loader.state_dict()`` (the global epoch and position of the batches
the loop received), and on resume ``batches.load_state_dict(state)`` before building the
pipeline: element 0 is then the next batch (``until_epoch`` counts from there).
:class:`~ofindex.integrations.grain_mixing.GrainMixture` does the same for a weighted mixture.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..errors import missing_extra

try:
    import grain
except ImportError as _exc:  # without the extra: say which one to install
    raise missing_extra("ofindex.integrations.grain", "grain", _exc) from _exc

from ..shuffle import GlobalShuffleSampler, SequentialSampler
from ..shuffle.elements import ElementIndex
from ._fetch import BatchFetch, RecordSource
from ._grain_elements import BatchElements, batch_allocator, batch_read_options

__all__ = ["GrainBatches", "batch_read_options"]


class GrainBatches(BatchElements):
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
        images: ``{feature: (height, width)}``: ``bytes`` features holding JPEG or PNG
            images (``ofindex.decode.images.FORMATS``), decoded to RGB and resized on every
            core without the GIL into a ``uint8`` array
            ``(batch, height, width, 3)`` (:func:`ofindex.decode.images.decode_images`;
            ``None`` instead of a size: no resize). Needs ``pip install 'ofindex[images]'``.

    Raises:
        ValueError: ``batch_size < 1``, the source is empty, ``num_replicas``/``rank`` are
            invalid, or ``images`` names a feature the decoder does not give as
            ``FixedLen((), "bytes")``.
    """

    def __init__(self, source: RecordSource, batch_size: int,
                 decoder: Callable[..., Any] | None = None,
                 *, seed: int = 0, shuffle: bool = True, drop_remainder: bool = False,
                 num_replicas: int = 1, rank: int = 0, pack_bytes: bool = False,
                 images: Mapping[str, tuple[int, int] | None] | None = None) -> None:
        super().__init__()
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self._source = source
        self._batch_size = int(batch_size)
        self._fetch = BatchFetch(source, decoder, bool(pack_bytes), images)
        sampler_type = GlobalShuffleSampler if shuffle else SequentialSampler
        self._sampler = sampler_type(len(source), num_replicas=num_replicas, rank=rank,
                                     drop_last=drop_remainder, seed=seed)
        self._drop = bool(drop_remainder)
        self._elements = ElementIndex(self._sampler.partition, self._batch_size, self._drop)
        self._len = self._elements.per_epoch

    def __len__(self) -> int:
        """Batches per epoch (of this rank's share)."""
        return self._len

    def indices(self, index: int) -> np.ndarray:
        """The global record numbers of element ``index``.

        Args:
            index: The element: batch ``index % len(self)`` of epoch ``index // len(self)``
                (counted from the resume point after :meth:`load_state_dict`).

        Returns:
            An int64 array of record numbers.

        Raises:
            IndexError: ``index`` is negative.
        """
        where = self._elements.locate(int(index))
        order = self._sampler.order_of(where.epoch)
        picked: np.ndarray = order(where.partition.positions(where.begin, where.end))
        return picked

    def until_epoch(self, epoch: int) -> grain.MapDataset:
        """The elements from the start (or resume point) to the end of epoch ``epoch - 1``.

        Args:
            epoch: The first epoch not to read (``2``: epochs 0 and 1 of a fresh run).

        Returns:
            A ``MapDataset`` of those batches, each epoch in its own order.
        """
        return self.repeat()[: self._elements.until(int(epoch))]

    # -- checkpoints (a tracker for ofindex.shuffle.ResumableLoader) ---------------------------
    def pass_mark(self) -> ElementIndex:
        """Where element 0 lies (the start or the loaded resume point).

        Returns:
            The element index of this run.
        """
        return self._elements

    def state_after(self, mark: ElementIndex, batches: int, finished: bool) -> dict[str, Any]:
        """The global state once every rank consumed ``batches`` elements from element 0.

        Args:
            mark: From :meth:`pass_mark`.
            batches: Elements the loop received.
            finished: Ignored (an element count says where an epoch ends).

        Returns:
            A ``GlobalShuffleSampler``-compatible state dict (epoch and global position).
        """
        epoch, position = mark.state(int(batches))
        return self._sampler.state_at(epoch, position)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Start element 0 at a saved state (saved with any number of ranks or workers).

        Args:
            state: A dict from :meth:`state_after` (or a ``GlobalShuffleSampler``'s state
                for the same records and seed).

        Raises:
            StateError: The state was saved for other records, seed or order, or a field is
                missing, unknown, of the wrong type or out of range.
        """
        self._sampler.load_state_dict(state)
        self._restart()

    def set_epoch(self, epoch: int) -> None:
        """Start element 0 at the beginning of epoch ``epoch``.

        After :meth:`load_state_dict` of a state saved in epoch ``E``: for an epoch before
        ``E`` (finished before the checkpoint) and for ``E`` itself, element 0 stays the
        next batch of the state, so ``until_epoch(epoch + 1)`` gives nothing for an earlier
        epoch and the rest of ``E`` for ``E``; a later epoch starts at its beginning, and
        from then on the state is used up (a Grain pipeline has no pass of its own to use
        it up earlier).

        Args:
            epoch: The epoch, a whole number ``>= 0``.

        Raises:
            StateError: ``epoch`` is not a whole number ``>= 0``.
        """
        self._sampler.set_epoch(epoch)
        self._restart()

    def _restart(self) -> None:
        mark = self._sampler.next_pass()
        self._elements = ElementIndex(self._sampler.partition, self._batch_size, self._drop,
                                      mark.epoch, mark.partition.start)

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
        return self._fetch(self.indices(index), batch_allocator())[0]

    def __str__(self) -> str:
        return (f"GrainBatches(batch_size={self._batch_size}, batches={self._len}, "
                f"source={self._source!r})")
