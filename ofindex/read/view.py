"""A view of a dataset: some of its records, by their global numbers (``ds.where(...)``,
``ds.split_by(...)``), read as a dataset of their own.

Record ``i`` of a view is record ``positions[i]`` of its dataset, ``positions`` ascending;
every read goes to the dataset (``view[i]`` one record, a slice or ``__getitems__`` one
batch read through the dataset's batch strategies, iteration a batch read per list of
records), so a view reads exactly as its dataset does (checks, decoding, caches, remote
rounds). It has what samplers, resumable loaders and mixtures take of a dataset: ``len``,
``cumulative_counts`` (its records per shard of the dataset, for the block shuffle) and an
``identity`` of its own (a digest of the dataset's identity and the view's records), so a
state saved on a view is refused by the whole dataset or another view.
"""

import hashlib
import itertools
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol

import numpy as np

from ..errors import RecordIndexError
from ..formats.framing import RecordFormat
from .sequential.record_batch import RecordBatch
from .table import as_indices

#: Records read by one batch call when a view is iterated (a list of up to this many).
_ITERATION_RECORDS = 4096


class ViewedDataset(Protocol):
    """What a view needs of its dataset (an ofindex ``Dataset``)."""

    format: RecordFormat
    decode: Any

    @property
    def identity(self) -> str: ...

    @property
    def cumulative_counts(self) -> np.ndarray: ...

    def __len__(self) -> int: ...

    def __getitem__(self, key: Any) -> Any: ...

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[Any]: ...

    def mapped_spans(self, indices: Sequence[int] | np.ndarray) -> Any: ...

    def record_lengths(self, indices: Sequence[int] | np.ndarray) -> np.ndarray: ...

    def locate(self, index: int) -> tuple[int, int]: ...

    def positions(self, **conditions: object) -> np.ndarray: ...

    def lookup(self, column: str, value: object) -> Any: ...

    def split_by(self, column: str, fractions: Mapping[str, float]
                 ) -> Mapping[str, "DatasetView"]: ...

    def groups(self, column: str) -> tuple[list[Any], list[np.ndarray]]: ...

    def payloads(self, indices: Sequence[int] | np.ndarray) -> list[bytes]: ...

    def close(self) -> None: ...


class DatasetView:
    """Some records of a dataset, read as a dataset: record ``i`` is the dataset's record
    ``positions[i]``. Made by ``ds.where(...)`` and ``ds.split_by(...)``.

    Args:
        dataset: The dataset (an ofindex ``Dataset``).
        positions: Its records in the view, ascending and each once (int64).
        description: What chose them, for ``repr``.
    """

    def __init__(self, dataset: ViewedDataset, positions: np.ndarray,
                 description: str = "") -> None:
        self.dataset = dataset
        self._positions = np.ascontiguousarray(positions, dtype=np.int64)
        self._positions.flags.writeable = False
        self.description = description
        self._identity: str | None = None

    # -- what the view is -------------------------------------------------------------------
    @property
    def format(self) -> RecordFormat:
        """The dataset's record framing."""
        return self.dataset.format

    @property
    def decode(self) -> Any:
        """The dataset's ``decode`` (applied to every record read)."""
        return self.dataset.decode

    @property
    def identity(self) -> str:
        """What this view is: 16 hexadecimal digits, a digest of its dataset's identity and
        its records' numbers (resume and mixture states carry it)."""
        if self._identity is None:
            digest = hashlib.sha256(b"ofindex view 1\0")
            digest.update(self.dataset.identity.encode("ascii"))
            digest.update(self._positions.astype("<i8").tobytes())
            self._identity = digest.hexdigest()[:16]
        return self._identity

    @property
    def cumulative_counts(self) -> np.ndarray:
        """``cumulative_counts[k]`` = the view's records in the dataset's shards ``0..k``
        (for samplers that keep to shards)."""
        counts: np.ndarray = np.searchsorted(self._positions, self.dataset.cumulative_counts,
                                             side="left").astype(np.int64)
        return counts

    def __len__(self) -> int:
        """The number of records in the view."""
        return len(self._positions)

    def __repr__(self) -> str:
        what = f" where {self.description}" if self.description else ""
        return f"DatasetView({len(self)} of {len(self.dataset)} records{what})"

    def global_positions(self, indices: Sequence[int] | np.ndarray | None = None
                         ) -> np.ndarray:
        """The dataset's record numbers of the view's records.

        Args:
            indices: The view's record numbers (negative from the end); ``None``: all.

        Returns:
            The dataset's record numbers (int64; all of them read-only, ascending).

        Raises:
            RecordIndexError: An index is out of range.
        """
        if indices is None:
            return self._positions
        chosen: np.ndarray = self._positions[self._checked(as_indices(indices))]
        return chosen

    def _checked(self, indices: np.ndarray) -> np.ndarray:
        n = len(self._positions)
        if len(indices) and (int(indices.min()) < -n or int(indices.max()) >= n):
            bad = int(indices.min()) if int(indices.min()) < -n else int(indices.max())
            raise RecordIndexError(f"record {bad} is out of range for a view of {n} records")
        return np.where(indices < 0, indices + n, indices)

    # -- reading ----------------------------------------------------------------------------
    def __getitem__(self, key: int | np.integer | slice | Sequence[int] | np.ndarray) -> Any:
        """Read one record of the view, or a list of them (as ``Dataset.__getitem__``).

        Args:
            key: A record number of the view (negative from the end), a slice, or a 1-d
                sequence or array of them.

        Returns:
            The record (decoded as the dataset decodes), or a list of them.

        Raises:
            RecordIndexError: A record number is out of range.
            TypeError: ``key`` is of another kind.
        """
        if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
            n = len(self._positions)
            i = int(key)
            if not -n <= i < n:
                raise RecordIndexError(f"record {i} is out of range for a view of {n} records")
            return self.dataset[int(self._positions[i])]
        if isinstance(key, slice):
            return self.dataset.__getitems__(self._positions[key])
        return self.dataset.__getitems__(self.global_positions(as_indices(key, strict=True)))

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[Any]:
        """Read a batch of the view's records with one batch read of the dataset.

        Args:
            indices: The view's record numbers, any order, duplicates allowed.

        Returns:
            The records, in the order of ``indices``.

        Raises:
            RecordIndexError: A record number is out of range.
        """
        return self.dataset.__getitems__(self.global_positions(indices))

    def mapped_spans(self, indices: Sequence[int] | np.ndarray) -> Any:
        """As ``Dataset.mapped_spans``, for the view's records.

        Args:
            indices: The view's record numbers.

        Returns:
            The spans, or ``None`` (see ``Dataset.mapped_spans``).
        """
        return self.dataset.mapped_spans(self.global_positions(indices))

    def record_lengths(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Payload lengths of the view's records, from the index alone.

        Args:
            indices: The view's record numbers.

        Returns:
            An int64 array of payload lengths.
        """
        return self.dataset.record_lengths(self.global_positions(indices))

    def locate(self, index: int) -> tuple[int, int]:
        """Where one of the view's records lives, without reading data.

        Args:
            index: The view's record number.

        Returns:
            ``(shard number, record number inside the shard)``.

        Raises:
            RecordIndexError: ``index`` is out of range.
        """
        return self.dataset.locate(int(self.global_positions([index])[0]))

    def __iter__(self) -> Iterator[Any]:
        """Iterate over the view's records in order (see :meth:`iter_records`).

        Returns:
            An iterator over the records.
        """
        return self.iter_records()

    def iter_records(self, start: int = 0, stop: int | None = None) -> Iterator[Any]:
        """The view's records ``start..stop-1`` in order, read a list at a time.

        Args:
            start: The view's first record.
            stop: One past its last (default: the end).

        Returns:
            An iterator over the records.

        Raises:
            RecordIndexError: ``[start, stop)`` is not a valid range.
        """
        return itertools.chain.from_iterable(
            self.iter_batches(_ITERATION_RECORDS, start, stop))

    def iter_batches(self, batch_size: int = 1024, start: int = 0, stop: int | None = None,
                     *, as_buffer: bool = False) -> Iterator[Any]:
        """The view's records ``start..stop-1`` in order, ``batch_size`` at a time, each
        batch one batch read of the dataset.

        Args:
            batch_size: Records per batch (the last may be shorter).
            start: The view's first record.
            stop: One past its last (default: the end).
            as_buffer: Yield :class:`~ofindex.read.sequential.record_batch.RecordBatch` objects (raw
                payloads back to back; ``first`` is the batch's first record in the view).

        Returns:
            An iterator over the batches: lists of records, or ``RecordBatch`` objects.

        Raises:
            ValueError: ``batch_size`` is not a whole number >= 1.
            RecordIndexError: ``[start, stop)`` is not a valid range.
        """
        if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size < 1:
            raise ValueError(f"batch_size must be a whole number >= 1, got {batch_size!r}")
        n = len(self._positions)
        stop = n if stop is None else min(stop, n)
        if start < 0 or start > stop:
            raise RecordIndexError(f"iteration range [{start}, {stop}) is invalid for a view "
                                   f"of {n} records")
        return self._batches(int(batch_size), start, stop, as_buffer)

    def _batches(self, size: int, start: int, stop: int, as_buffer: bool) -> Iterator[Any]:
        for lo in range(start, stop, size):
            chosen = self._positions[lo:min(lo + size, stop)]
            if not as_buffer:
                yield self.dataset.__getitems__(chosen)
                continue
            payloads = self.dataset.payloads(chosen)
            offsets = np.zeros(len(payloads) + 1, dtype=np.int64)
            np.cumsum([len(p) for p in payloads], out=offsets[1:])
            data = np.frombuffer(b"".join(payloads), dtype=np.uint8).copy()
            yield RecordBatch(data, offsets, lo)

    def payloads(self, indices: Sequence[int] | np.ndarray) -> list[bytes]:
        """Read a batch of the view's records' payloads, without the dataset's ``decode``.

        Args:
            indices: The view's record numbers.

        Returns:
            The payloads, in the order of ``indices``.

        Raises:
            RecordIndexError: A record number is out of range.
        """
        return self.dataset.payloads(self.global_positions(indices))

    # -- queries ----------------------------------------------------------------------------
    def positions(self, **conditions: object) -> np.ndarray:
        """The dataset's record numbers of the view's records meeting conditions.

        Args:
            conditions: As for ``Dataset.positions`` (none: every record of the view).

        Returns:
            The record numbers, ascending (int64).
        """
        if not conditions:
            every: np.ndarray = self._positions.copy()
            return every
        chosen: np.ndarray = np.intersect1d(
            self._positions, self.dataset.positions(**conditions), assume_unique=True)
        return chosen

    def where(self, **conditions: object) -> "DatasetView":
        """The view's records meeting conditions, as a view of the dataset.

        Args:
            conditions: As for ``Dataset.where``.

        Returns:
            The narrower view.
        """
        chosen = self.positions(**conditions)
        text = ", ".join(f"{k}={v!r}" for k, v in conditions.items())
        return DatasetView(self.dataset, chosen,
                           f"{self.description}, {text}" if self.description else text)

    def lookup(self, column: str, value: object) -> Any:
        """As ``Dataset.lookup``, among the view's records.

        Args:
            column: The column.
            value: A value, or a list of values.

        Returns:
            The dataset's record numbers (an array, or one per value).
        """
        found = self.dataset.lookup(column, value)
        if isinstance(found, list):
            return [np.intersect1d(f, self._positions, assume_unique=True) for f in found]
        return np.intersect1d(found, self._positions, assume_unique=True)

    def split_by(self, column: str, fractions: Mapping[str, float]
                 ) -> dict[str, "DatasetView"]:
        """As ``Dataset.split_by``, among the view's records.

        Args:
            column: The column hashed.
            fractions: Each part's share.

        Returns:
            A view per part.
        """
        return {name: DatasetView(self.dataset, np.intersect1d(
            part.global_positions(), self._positions, assume_unique=True), part.description)
            for name, part in self.dataset.split_by(column, fractions).items()}

    def groups(self, column: str) -> tuple[list[Any], list[np.ndarray]]:
        """As ``Dataset.groups``, among the view's records.

        Args:
            column: The column.

        Returns:
            ``(values, indices)``: the distinct values and each one's records, in the view's
            numbers (what a sampler of the view draws).
        """
        values, groups = self.dataset.groups(column)
        out_values, out_groups = [], []
        for value, members in zip(values, groups, strict=True):
            inside = np.flatnonzero(np.isin(self._positions, members, assume_unique=True))
            if len(inside):
                out_values.append(value)
                out_groups.append(inside.astype(np.int64))
        return out_values, out_groups

    # -- handles ----------------------------------------------------------------------------
    def close(self) -> None:
        """Release the dataset's handles (see ``Dataset.close``); the view stays usable."""
        self.dataset.close()

    def __enter__(self) -> "DatasetView":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
