"""What a dataset knows without reading data: its shards, counts, where a record lives, its
records' lengths, and the state of its indexes (a base class of :class:`ofindex.Dataset`)."""

from __future__ import annotations

from bisect import bisect_right as _bisect_right
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import RecordIndexError
from ..formats.sidecar_header import Compression
from ..storage import Storage
from .shards import Shard, ShardInfo


def as_indices(key: Any, strict: bool = False) -> np.ndarray:
    """Record numbers as an int64 array; a number too large for int64 is out of range.

    ``strict`` (``ds[key]``): only a 1-d sequence or array of integers, else TypeError.
    """
    if type(key) is np.ndarray or strict:
        idx = np.asarray(key)
    else:  # a list: converted as numpy converts it (floats truncated), only faster
        try:
            idx = np.asarray(key, dtype=np.int64)
        except OverflowError:
            idx = np.asarray(key)  # too large for int64: refused below
    kind = idx.dtype.kind
    if kind == "i" and idx.ndim == 1:  # the common case: kept cheap
        return idx if idx.dtype.itemsize == 8 else idx.astype(np.int64)
    if kind == "O" and idx.ndim == 1:  # integers beyond int64 make object arrays
        huge = [v for v in idx.tolist() if isinstance(v, int) and not -(2**63) <= v < 2**63]
        if huge:
            raise RecordIndexError(f"record index {huge[0]} is out of range")
    if strict and (kind not in "iu" or idx.ndim != 1):
        raise TypeError(f"dataset indices must be integers, slices or 1-d integer arrays, "
                        f"not {key!r:.60}")
    if kind == "u" and idx.size and int(idx.max()) >= 2**63:
        raise RecordIndexError(f"record index {int(idx.max())} is out of range")
    return idx.astype(np.int64, copy=False).reshape(-1)


class DatasetInfo:
    """The metadata half of :class:`ofindex.Dataset` (which sets these attributes)."""

    _storage: Storage
    _shards: list[Shard]
    _cum: np.ndarray
    _cum_list: list[int]
    _first: np.ndarray
    _len: int

    def _check_index(self, index: int) -> int:
        n = self._len
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise RecordIndexError(
                f"record index {index} is out of range for a dataset of {n} records "
                f"(valid: {-n} to {n - 1})" if n else f"record index {index}: the dataset is empty"
            )
        return i

    def _normalize(self, idx: np.ndarray) -> np.ndarray:
        n = self._len
        fixed: np.ndarray = np.where(idx < 0, idx + n, idx)
        bad = (fixed < 0) | (fixed >= n)
        if bad.any():
            self._check_index(int(idx[np.argmax(bad)]))
        return fixed

    @property
    def shards(self) -> list[ShardInfo]:
        """Path, record count, size and sidecar of every shard."""
        return [
            ShardInfo(self._storage.url(s.path), s.records, s.size,
                      s.index_storage.url(s.index_path), s.partial)
            for s in self._shards
        ]

    @property
    def compressions(self) -> list[Compression]:
        """How each shard's data file is compressed (loads every sidecar)."""
        return [s.sidecar.compression for s in self._shards]

    @property
    def cumulative_counts(self) -> np.ndarray:
        """``cumulative_counts[k]`` = records in shards ``0..k`` (for samplers)."""
        counts: np.ndarray = self._cum.copy()
        return counts

    def shards_without_checksums(self) -> list[str]:
        """List the shards whose sidecars hold no payload checksums (loads every sidecar).

        OFRecord payloads are checked on read only against such checksums.

        Returns:
            The shards' URLs.
        """
        return [self._storage.url(s.path) for s in self._shards
                if s.sidecar.checksums is None]

    def check_indexes(self) -> None:
        """Check every sidecar's offsets block against its CRC (reads all sidecars).

        Raises:
            SidecarError: A sidecar's offsets are corrupt.
        """
        for shard in self._shards:
            shard.sidecar.check_offsets()

    def locate(self, index: int) -> tuple[int, int]:
        """Find where a record lives, without reading data.

        Args:
            index: A global record number (negative counts from the end).

        Returns:
            ``(shard number, record number inside the shard)``.

        Raises:
            RecordIndexError: ``index`` is out of range.
        """
        i = self._check_index(index)
        s = _bisect_right(self._cum_list, i)
        return s, i - int(self._first[s])

    def record_lengths(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Payload lengths of records, from the index alone (no data read).

        Args:
            indices: Record numbers.

        Returns:
            An int64 array of payload lengths in bytes.

        Raises:
            RecordIndexError: A record number is out of range.
            SidecarError: The sidecar's offsets are corrupt.
        """
        idx = self._normalize(as_indices(indices))
        shard_of = np.searchsorted(self._cum, idx, side="right")
        out = np.empty(len(idx), dtype=np.int64)
        for s in np.unique(shard_of):
            sel = np.flatnonzero(shard_of == s)
            sc = self._shards[s].sidecar
            starts, ends = sc.spans(idx[sel] - self._first[s])
            out[sel] = ends - starts - sc.format.overhead
        return out

