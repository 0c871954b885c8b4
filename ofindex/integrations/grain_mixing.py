"""Grain integration of weighted mixing: a ``grain.MapDataset`` of mixture batches.

Element ``k`` of :class:`GrainMixture` is this rank's batch ``k`` of a
:class:`~ofindex.shuffle.mixing.MixtureSampler` (over its epochs, from the start or a loaded
resume point), read from the sources (one batch read of their concatenation when they are
ofindex datasets that read alike, else one ``__getitems__`` per source) and decoded with one
decoder call, with ``"source"``: the source of each record::

    mixture = MixtureSampler([a, b], [0.7, 0.3], 256, seed=0)
    batches = GrainMixture([a, b], mixture, BatchDecoder(spec))
    for batch in batches.until_epoch(2).to_iter_dataset(): ...
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import missing_extra

try:  # first: the private modules below would name ofindex.integrations.grain instead
    import grain
except ImportError as _exc:  # without the extra: say which one to install
    raise missing_extra("ofindex.integrations.grain_mixing", "grain", _exc) from _exc

from ..shuffle.elements import ElementIndex
from ..shuffle.mixing import MixtureSampler
from ._fetch import BatchFetch, RecordSource
from ._grain_elements import BatchElements, batch_allocator
from ._mixed_source import MixedSource

__all__ = ["GrainMixture"]


class GrainMixture(BatchElements):
    """Decoded batches of a weighted mixture, as a Grain ``MapDataset``.

    Args:
        sources: The datasets mixed (any record sources), in the sampler's order.
        sampler: The :class:`~ofindex.shuffle.mixing.MixtureSampler` over them (its weights,
            batch size, seed, epochs, ranks).
        decoder: Called once per batch with its records (a common spec), e.g. a
            :class:`~ofindex.decode.BatchDecoder`; ``None``: ``{"records": [...]}``.

    Raises:
        ValueError: The sources' sizes are not the sampler's.
    """

    def __init__(self, sources: Sequence[RecordSource], sampler: MixtureSampler,
                 decoder: Callable[..., Any] | None = None) -> None:
        super().__init__()
        self._mixed = MixedSource(sources)
        if [len(s) for s in self._mixed.sources] != sampler.sizes:
            raise ValueError(f"the sources hold {[len(s) for s in self._mixed.sources]} "
                             f"records but the sampler mixes {sampler.sizes}; give the "
                             "sampler the same sources")
        self._sampler = sampler
        self._fetch = BatchFetch(self._mixed, decoder)
        self._decoder = decoder
        self._elements = self._index()

    def _index(self) -> ElementIndex:
        """Element 0 at the sampler's next pass (a loaded state's next batch while it
        stands)."""
        mark = self._sampler.next_pass()
        return ElementIndex(self._sampler.partition, 1, False, mark.epoch,
                            mark.partition.start)

    def __len__(self) -> int:
        """Batches per mixture epoch on this rank."""
        return self._elements.per_epoch

    def __getitem__(self, index: Any) -> Any:
        """One decoded batch with the source of each record (a slice gives a sliced dataset).

        Args:
            index: The element number, or a slice.

        Returns:
            The decoder's batch plus ``"source"`` (an int64 array), or
            ``{"records": [...], "source": ...}`` without a decoder.

        Raises:
            IndexError: ``index`` is negative, or whatever the sources or decoder raise.
        """
        if isinstance(index, slice):
            return self.slice(index)
        where = self._elements.locate(int(index))
        position = int(where.partition.positions(where.begin, where.end)[0])
        sources, indices = self._sampler.batch_at(where.epoch, position)
        batch = self._fetch(indices, batch_allocator())[0]
        if isinstance(batch, dict):
            return {**batch, "source": sources}
        return {"records": batch, "source": sources}

    def until_epoch(self, epoch: int) -> grain.MapDataset:
        """The batches from the start (or resume point) to the end of mixture epoch
        ``epoch - 1``.

        Args:
            epoch: The first mixture epoch not to read.

        Returns:
            A ``MapDataset`` of those batches.
        """
        return self.repeat()[: self._elements.until(int(epoch))]

    def pass_mark(self) -> ElementIndex:
        """Where element 0 lies (for :class:`~ofindex.shuffle.progress.ResumableLoader`).

        Returns:
            The element index of this run.
        """
        return self._elements

    def state_after(self, mark: ElementIndex, batches: int, finished: bool) -> dict[str, Any]:
        """The mixture's global state once every rank consumed ``batches`` elements.

        Args:
            mark: From :meth:`pass_mark`.
            batches: Elements the loop received.
            finished: Ignored.

        Returns:
            The sampler's state dict (epoch, batch position, stream offsets).
        """
        epoch, position = mark.state(int(batches))
        return self._sampler.state_at(epoch, position)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Start element 0 at a saved state (any number of ranks or workers; new weights of
        the sampler apply from there on).

        Args:
            state: A dict from :meth:`state_after` or the sampler's ``state_dict()``.

        Raises:
            StateError: The state does not fit the sampler, or a field is missing, unknown,
                of the wrong type or out of range.
        """
        self._sampler.load_state_dict(state)
        self._elements = self._index()

    def set_epoch(self, epoch: int) -> None:
        """Start element 0 at the beginning of mixture epoch ``epoch``.

        After :meth:`load_state_dict` of a state saved in epoch ``E``: for an epoch before
        ``E`` and for ``E`` itself element 0 stays the state's next batch (so
        ``until_epoch(epoch + 1)`` gives nothing before ``E``, the rest of ``E`` for ``E``);
        a later epoch starts at its beginning, and from then on the state is used up.

        Args:
            epoch: The mixture epoch, a whole number ``>= 0``.

        Raises:
            StateError: ``epoch`` is not a whole number ``>= 0``.
        """
        self._sampler.set_epoch(epoch)
        self._elements = self._index()

    def source_of(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """The source of each global index (``offset_s + record``).

        Args:
            indices: Global indices.

        Returns:
            An int64 array of source numbers.
        """
        return self._mixed.source_of(indices)

    def __str__(self) -> str:
        return f"GrainMixture({self._mixed!r}, batches={len(self)})"
