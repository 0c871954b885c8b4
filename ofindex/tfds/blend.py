"""Several datasets' steps (or episodes) read as one, for a weighted mixture.

:class:`ofindex.shuffle.MixtureSampler` hands out global indices ``offset_s + j`` (``offset_s``
the items of the sources before ``s``); :class:`Blend` reads them from the right source,
one read per source for a batch (the Open X-Embodiment recipe: many RLDS datasets mixed
with weights)::

    views = [ofindex.open_tfds(p).steps for p in paths]
    sampler = MixtureSampler(views, weights, batch_size=256)
    blend = Blend(views)
    for batch in sampler:
        steps = blend.__getitems__(batch)
"""

import hashlib
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from ..errors import RecordIndexError


class Source(Protocol):
    """What can be blended: a sized view read by a list of positions (a ``TfdsDataset``,
    its ``steps``)."""

    def __len__(self) -> int: ...

    def __getitems__(self, positions: Sequence[int] | np.ndarray) -> list[Any]: ...


class Blend:
    """The sources one after the other, read by global index.

    Args:
        sources: The views to read (each with ``len()`` and ``__getitems__``).

    Raises:
        ValueError: No source is given.
    """

    def __init__(self, sources: Sequence[Source]) -> None:
        if not sources:
            raise ValueError("Blend needs at least one source")
        self.sources = list(sources)
        #: ``ends[s]``: one past source ``s``'s last global index.
        self.ends = np.cumsum([len(s) for s in self.sources]).astype(np.int64)

    @property
    def identity(self) -> str:
        """The sources' identities together (a resume state carries it)."""
        parts = [str(getattr(s, "identity", len(s))) for s in self.sources]
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]

    def __len__(self) -> int:
        """All the sources' items.

        Returns:
            The sum of the sources' lengths.
        """
        return int(self.ends[-1])

    def source_of(self, positions: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each global index's source and its position in that source.

        Args:
            positions: Global indices.

        Returns:
            ``(sources, local positions)``.

        Raises:
            RecordIndexError: An index is out of range (an ``IndexError``).
        """
        positions = np.asarray(positions, dtype=np.int64)
        if len(positions) and (positions.min() < 0 or positions.max() >= len(self)):
            bad = positions[(positions < 0) | (positions >= len(self))][0]
            raise RecordIndexError(f"index {int(bad)} is out of range: the blend has "
                                   f"{len(self)} items")
        source = np.searchsorted(self.ends, positions, side="right")
        starts = self.ends[source] - np.asarray([len(self.sources[s]) for s in source],
                                                dtype=np.int64).reshape(-1)
        return source, positions - starts

    def __getitems__(self, positions: Sequence[int] | np.ndarray) -> list[Any]:
        """The items at global ``positions``: one read per source.

        Args:
            positions: Global indices (``MixtureSampler``'s batches).

        Returns:
            The items, in the order asked.
        """
        source, local = self.source_of(positions)
        out: list[Any] = [None] * len(local)
        for s in np.unique(source).tolist():
            where = np.flatnonzero(source == s)
            for k, item in zip(where.tolist(), self.sources[s].__getitems__(local[where]),
                               strict=True):
                out[k] = item
        return out

    def __getitem__(self, position: int) -> Any:
        """One item by global index.

        Args:
            position: A global index.

        Returns:
            The item of the source it falls in.
        """
        return self.__getitems__([position])[0]
