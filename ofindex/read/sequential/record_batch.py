"""The batches :meth:`Dataset.iter_batches` yields: a list of payloads, or one buffer of
payloads back to back (:class:`RecordBatch`, Arrow's binary layout)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np


class RecordBatch:
    """Payloads of consecutive records, back to back in one buffer (Arrow's binary layout).

    No Python object is made per record: ``data[offsets[k]:offsets[k + 1]]`` is record
    ``first + k``. Indexing or iterating copies a record out as ``bytes``; :meth:`view`
    gives a zero-copy ``memoryview``. The batch owns its buffer (it does not refer to the
    files), so it stays valid after the dataset is closed.

    Args:
        data: The payloads, back to back (a 1-d ``uint8`` array).
        offsets: ``len + 1`` int64 positions in ``data``: record ``k`` spans
            ``offsets[k]:offsets[k + 1]``.
        first: The global number of the batch's first record.
    """

    __slots__ = ("data", "first", "offsets")

    def __init__(self, data: np.ndarray, offsets: np.ndarray, first: int) -> None:
        self.data = data
        self.offsets = offsets
        self.first = first

    def __len__(self) -> int:
        """The number of records in the batch."""
        return len(self.offsets) - 1

    def __getitem__(self, k: int) -> bytes:
        """Record ``first + k``'s payload (a copy).

        Args:
            k: The position in the batch (negative counts from the end).

        Returns:
            The payload bytes.

        Raises:
            IndexError: ``k`` is out of range.
        """
        return bytes(self.view(k))

    def view(self, k: int) -> memoryview:
        """Record ``first + k``'s payload without a copy.

        Args:
            k: The position in the batch (negative counts from the end).

        Returns:
            A read-only view into :attr:`data`.

        Raises:
            IndexError: ``k`` is out of range.
        """
        n = len(self)
        if not -n <= k < n:
            raise IndexError(f"record {k} is out of range for a batch of {n} records")
        k %= n
        a, b = int(self.offsets[k]), int(self.offsets[k + 1])
        return memoryview(self.data.data).toreadonly()[a:b]

    def __iter__(self) -> Iterator[bytes]:
        """Iterate over the payloads (copies), in order."""
        mv = self.data.data
        offs = self.offsets.tolist()
        for a, b in itertools.pairwise(offs):
            yield bytes(mv[a:b])

    @property
    def lengths(self) -> np.ndarray:
        """Payload lengths in bytes (int64)."""
        lengths: np.ndarray = np.diff(self.offsets)
        return lengths

    def to_list(self) -> list[bytes]:
        """The payloads as a list of ``bytes`` (one copy each)."""
        return list(self)

    def __repr__(self) -> str:
        return (f"RecordBatch(records {self.first}..{self.first + len(self) - 1}, "
                f"{len(self.data)} bytes)")
