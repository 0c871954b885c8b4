"""Several record sources read as one: the index space of a mixture.

Global index ``offset_s + i`` is record ``i`` of source ``s`` (``offset_s``: the records of
the sources before ``s``), the indices :class:`ofindex.shuffle.mixing.MixtureSampler`
yields.  The sources can be anything the integrations read (ofindex datasets on any storage,
compressed or not, with their own storage options; lists of records). When they are
ofindex datasets that read alike, a batch is read through their concatenation
(:func:`ofindex.read.concat.concatenated`): one batch read, as for one dataset, instead of
one per source.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..formats.framing import RecordFormat
from ..read.concat import concatenated
from ..read.dataset import Dataset
from ._fetch import RecordSource

__all__ = ["MixedSource"]


class MixedSource:
    """Record sources one after the other: a batch is one read of their concatenation when
    they are ofindex datasets that read alike, else one ``__getitems__`` per source.

    Args:
        sources: The record sources (each with ``__len__`` and ``__getitem__``, and
            optionally ``__getitems__``).

    Raises:
        ValueError: No source is given.
    """

    def __init__(self, sources: Sequence[RecordSource]) -> None:
        if not sources:
            raise ValueError("MixedSource needs at least one source")
        self.sources = list(sources)
        sizes = [len(s) for s in self.sources]
        self.offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        datasets = [s for s in self.sources if isinstance(s, Dataset)]
        #: The sources as one dataset (same numbering), or ``None``: read source by source.
        self.joined: Dataset | None = (
            concatenated(datasets) if len(datasets) == len(self.sources) else None)
        formats = {ds.format for ds in datasets}
        #: The sources' record framing when they are all ofindex datasets of one framing
        #: (what a decoder made without ``kind`` decodes), else ``None``.
        self.format: RecordFormat | None = (
            formats.pop() if len(datasets) == len(self.sources) and len(formats) == 1
            else None)

    def __len__(self) -> int:
        """Records of all sources."""
        return int(self.offsets[-1])

    def source_of(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """The source of each global index.

        Args:
            indices: Global indices.

        Returns:
            An int64 array of source numbers.

        Raises:
            IndexError: An index is outside ``[0, len(self))``.
        """
        got = np.asarray(indices, dtype=np.int64).reshape(-1)
        if got.size and (int(got.min()) < 0 or int(got.max()) >= len(self)):
            bad = int(got.min()) if int(got.min()) < 0 else int(got.max())
            raise IndexError(f"record {bad} is outside the mixture's {len(self)} records")
        found: np.ndarray = np.searchsorted(self.offsets, got, side="right") - 1
        return found.astype(np.int64)

    def split(self, indices: Sequence[int] | np.ndarray) -> list[tuple[int, np.ndarray,
                                                                      np.ndarray]]:
        """Global indices grouped by source.

        Args:
            indices: Global indices.

        Returns:
            ``(source, local indices, places in indices)`` for each source present, in
            source order.

        Raises:
            IndexError: An index is outside ``[0, len(self))``.
        """
        return self._groups(indices)[0]

    def _groups(self, indices: Sequence[int] | np.ndarray) -> tuple[
            list[tuple[int, np.ndarray, np.ndarray]], bool]:
        """:meth:`split`, and whether the indices are in source order (as a mixture's
        batches are: source 0's records first), so the groups are consecutive runs."""
        got = np.asarray(indices, dtype=np.int64).reshape(-1)
        which = self.source_of(got)
        out: list[tuple[int, np.ndarray, np.ndarray]] = []
        if bool((which[1:] >= which[:-1]).all()):
            cuts = np.searchsorted(which, np.arange(len(self.sources) + 1)).tolist()
            out.extend((s, got[cuts[s]:cuts[s + 1]] - self.offsets[s],
                        np.arange(cuts[s], cuts[s + 1]))
                       for s in range(len(self.sources)) if cuts[s] < cuts[s + 1])
            return out, True
        for s in np.unique(which).tolist():
            places = np.flatnonzero(which == s)
            out.append((int(s), got[places] - self.offsets[s], places))
        return out, False

    def __getitem__(self, index: int) -> Any:
        """One record.

        Args:
            index: A global index.

        Returns:
            The record of its source.

        Raises:
            IndexError: ``index`` is outside ``[0, len(self))``.
        """
        s = int(self.source_of([index])[0])
        if self.joined is not None:
            return self.joined[int(index)]
        return self.sources[s][int(index) - int(self.offsets[s])]

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[Any]:
        """Records of global indices, one ``__getitems__`` call per source.

        Args:
            indices: Global indices, any order (duplicates allowed).

        Returns:
            The records in the order of ``indices``.

        Raises:
            IndexError: An index is outside ``[0, len(self))``.
        """
        if self.joined is not None:
            self.source_of(indices)  # an index outside the mixture: the same IndexError
            return self.joined.__getitems__(indices)
        groups, ordered = self._groups(indices)
        parts = []
        for s, local, _ in groups:
            source = self.sources[s]
            fetch = getattr(source, "__getitems__", None)
            wanted = local.tolist()
            parts.append(fetch(wanted) if fetch is not None else [source[i] for i in wanted])
        if ordered:  # consecutive runs: the records as read, one source after the other
            return [rec for part in parts for rec in part]
        out: list[Any] = [None] * len(indices)
        for (_, _, places), recs in zip(groups, parts, strict=True):
            for place, rec in zip(places.tolist(), recs, strict=True):
                out[place] = rec
        return out

    def __repr__(self) -> str:
        return f"MixedSource({len(self.sources)} sources, {len(self)} records)"
