"""The shard table: a dataset's shards in order, and where each global record number lives.

A dataset numbers its records shard by shard. The table holds the shards (each with the
storage of its data file), the cumulative record counts, and answers the questions every read asks
first: is this record number valid, which shard holds it, which records of a batch fall in
which shard. It reads nothing: record counts come from the sidecars (or the manifest) when the
dataset is opened.
"""

from __future__ import annotations

import dataclasses
import itertools
from bisect import bisect_right
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import RecordIndexError, SidecarError
from ..formats.manifest import exact_sum
from ..storage import Storage
from .manifest_shards import ManifestShards
from .shards import Shard, ShardInfo

#: More records than this in one dataset can only come from corrupt indexes or manifests.
MAX_RECORDS = 1 << 62


def as_indices(key: Any, strict: bool = False) -> np.ndarray:
    """Record numbers as an int64 array; a number too large for int64 is out of range.

    Args:
        key: A sequence or array of record numbers.
        strict: Accept only a 1-d sequence or array of integers (``ds[key]``), else
            ``TypeError``; otherwise a list is converted as numpy converts it.

    Returns:
        A 1-d int64 array (not yet checked against the dataset's size).

    Raises:
        RecordIndexError: A number does not fit an int64.
        TypeError: With ``strict``, ``key`` is not a 1-d sequence of integers.
    """
    if type(key) is np.ndarray or strict:
        indices = np.asarray(key)
    else:  # a list: converted as numpy converts it (floats truncated), only faster
        try:
            indices = np.asarray(key, dtype=np.int64)
        except OverflowError:
            indices = np.asarray(key)  # too large for int64: refused below
    kind = indices.dtype.kind
    if kind == "i" and indices.ndim == 1:  # the common case: kept cheap
        return indices if indices.dtype.itemsize == 8 else indices.astype(np.int64)
    if kind == "O" and indices.ndim == 1:  # integers beyond int64 make object arrays
        huge = [v for v in indices.tolist() if isinstance(v, int) and not -(2**63) <= v < 2**63]
        if huge:
            raise RecordIndexError(f"record index {huge[0]} is out of range")
    if strict and (kind not in "iu" or indices.ndim != 1) and indices.size:
        raise TypeError(f"dataset indices must be integers, slices or 1-d integer arrays, "
                        f"not {key!r:.60}")
    if kind == "u" and indices.size and int(indices.max()) >= 2**63:
        raise RecordIndexError(f"record index {int(indices.max())} is out of range")
    return indices.astype(np.int64, copy=False).reshape(-1)


class IntView(Sequence[int]):
    """An int64 array seen as a sequence of Python ints (for ``bisect`` and arithmetic on
    the single-record path), without a list of them."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, k: Any) -> Any:
        return int(self.array[k]) if isinstance(k, (int, np.integer)) else self.array[k].tolist()


@dataclasses.dataclass(frozen=True)
class ShardGroups:
    """The records of a batch grouped by shard (stably: the order inside a shard is kept).

    Attributes:
        order: Positions in the batch, grouped by shard (``None``: one shard, as asked).
        shard_of: Each grouped record's shard number.
        local: Each grouped record's number inside its shard.
        groups: ``(shard number, first, one past the last)`` positions of each group.
    """

    order: np.ndarray | None
    shard_of: np.ndarray
    local: np.ndarray
    groups: list[tuple[int, int, int]]

    def restore(self, payloads: list[Any]) -> list[Any]:
        """``payloads`` (in grouped order) put back in the order of the batch."""
        if self.order is None:
            return payloads
        out = np.empty(len(payloads), dtype=object)
        out[self.order] = payloads
        return list(out.tolist())


class ShardTable:
    """A dataset's shards and the mapping of global record numbers.

    Args:
        storage: Storage of the data files the dataset was opened on (each shard carries
            the storage of its own file: a joined dataset's keep their sources').
        shards: The shards, in dataset order.

    Raises:
        SidecarError: The shards claim more records than any dataset can hold (corrupt
            indexes or manifest).
    """

    def __init__(self, storage: Storage, shards: Sequence[Shard]) -> None:
        self.storage = storage
        self.lazy = isinstance(shards, ManifestShards)
        #: The shards: a list, or (a compact manifest's) a sequence that makes them on access.
        self.shards: Sequence[Shard] = shards if isinstance(shards, ManifestShards) else list(
            shards)
        counts = (shards.counts if isinstance(shards, ManifestShards)
                  else np.array([s.records for s in self.shards], dtype=np.int64))
        total = exact_sum(counts)  # (numpy's sum wraps)
        if total > MAX_RECORDS or (len(counts) and int(counts.min()) < 0):
            raise SidecarError(
                f"the indexes of these {len(self.shards)} shards claim {total} records in "
                "all, more than any dataset can hold; an index or the manifest is corrupt — "
                "rebuild it with `ofindex build`"
            )
        self.cumulative = np.cumsum(counts)       # records up to and including shard k
        self.first = self.cumulative - counts     # global number of each shard's record 0
        #: The same as lists (indexing one is cheaper than indexing an array on a hot path),
        #: or for a compact manifest's many shards views giving ints (two lists of a million
        #: ints take 0.2 s and 72 MB to make).
        self.cumulative_list: Sequence[int] = (IntView(self.cumulative) if self.lazy
                                               else self.cumulative.tolist())
        self.first_list: Sequence[int] = (IntView(self.first) if self.lazy
                                          else self.first.tolist())
        self.size = int(self.cumulative[-1]) if len(counts) else 0
        #: Mean framed record size (which batches are big enough to spread over threads).
        self.mean_record_bytes = 0.0
        if isinstance(shards, ManifestShards):
            self.mean_record_bytes = shards.total_bytes / self.size if self.size else 0.0
        else:
            known = [s for s in self.shards if s.size >= 0 and s.records > 0]
            if known:
                self.mean_record_bytes = (sum(s.size for s in known)
                                          / sum(s.records for s in known))

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"ShardTable({len(self.shards)} shards, {self.size} records)"

    def check_index(self, index: int) -> int:
        """A record number (negative counts from the end) made non-negative.

        Raises:
            RecordIndexError: It is out of range.
        """
        n = self.size
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise RecordIndexError(
                f"record index {index} is out of range for a dataset of {n} records "
                f"(valid: {-n} to {n - 1})" if n else f"record index {index}: the dataset is empty"
            )
        return i

    def normalize(self, indices: np.ndarray) -> np.ndarray:
        """Record numbers (negative count from the end) made non-negative.

        Raises:
            RecordIndexError: One is out of range (the first such is named).
        """
        n = self.size
        fixed: np.ndarray = np.where(indices < 0, indices + n, indices)
        bad = (fixed < 0) | (fixed >= n)
        if bad.any():
            self.check_index(int(indices[np.argmax(bad)]))
        return fixed

    def locate(self, index: int) -> tuple[int, int]:
        """``(shard number, record number inside it)`` of a valid, non-negative record."""
        shard_no = bisect_right(self.cumulative_list, index)
        return shard_no, index - self.first_list[shard_no]

    def shard_numbers(self, indices: np.ndarray) -> np.ndarray:
        """The shard number of each (valid, non-negative) record."""
        if len(self.shards) == 1:
            return np.zeros(len(indices), dtype=np.int64)
        found: np.ndarray = np.searchsorted(self.cumulative, indices, side="right")
        return found

    def pieces(self, indices: np.ndarray, most: int) -> list[tuple[int, int]] | None:
        """Consecutive parts of a batch of (valid, non-negative) records, each in at most
        ``most`` shards, or ``None`` when the whole batch is.

        Args:
            indices: The records, in the order asked for.
            most: Shards a part may touch.

        Returns:
            ``(start, end)`` positions of each part in ``indices``, in order, or ``None``.
        """
        if len(indices) <= most or len(self.shards) <= most:
            return None
        shard_of = self.shard_numbers(indices)
        if len(np.unique(shard_of)) <= most:
            return None
        parts: list[tuple[int, int]] = []
        start, seen = 0, set[int]()
        for k, shard_no in enumerate(shard_of.tolist()):
            if shard_no not in seen and len(seen) == most:
                parts.append((start, k))
                start, seen = k, set()
            seen.add(shard_no)
        parts.append((start, len(indices)))
        return parts

    def touched(self, indices: np.ndarray) -> tuple[list[int], np.ndarray, np.ndarray]:
        """The shards (valid, non-negative) records ``indices`` are in.

        Args:
            indices: The records (int64).

        Returns:
            ``(touched, which, local)``: the shard numbers in increasing order; per record,
            its shard as an index into ``touched`` (int64); per record, its number inside
            its shard.
        """
        if len(self.shards) == 1:
            return [0], np.zeros(len(indices), dtype=np.int64), indices
        shard_of = self.shard_numbers(indices)
        # np.unique(return_inverse=True) costs twice this for the few hundred records of a
        # batch (it sorts twice); a batch's few shards are looked up in the sorted ones
        ordered = np.sort(shard_of)
        starts = np.empty(len(ordered), dtype=bool)
        starts[:1] = True
        np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
        found = ordered[starts]
        which = np.searchsorted(found, shard_of).astype(np.int64, copy=False)
        return found.tolist(), which, indices - self.first[shard_of]

    def group(self, indices: np.ndarray) -> ShardGroups:
        """Group (valid, non-negative) records by shard, keeping their order inside each."""
        n = len(indices)
        if len(self.shards) == 1:
            return ShardGroups(None, np.zeros(n, dtype=np.int64), indices, [(0, 0, n)])
        shard_of = np.searchsorted(self.cumulative, indices, side="right")
        order = np.argsort(shard_of, kind="stable")
        indices, shard_of = indices[order], shard_of[order]
        bounds = [0, *(np.flatnonzero(np.diff(shard_of)) + 1).tolist(), n]
        groups = [(int(shard_of[lo]), lo, hi) for lo, hi in itertools.pairwise(bounds)]
        return ShardGroups(order, shard_of, indices - self.first[shard_of], groups)

    def runs(self, start: int, stop: int) -> list[tuple[int, int, int]]:
        """The shards records ``start..stop-1`` span, in order: ``(shard number, first
        record inside it, one past the last)``."""
        if stop <= start:
            return []
        first_shard = bisect_right(self.cumulative_list, start)
        last_shard = bisect_right(self.cumulative_list, stop - 1)
        out = []
        for shard_no in range(first_shard, last_shard + 1):
            base = self.first_list[shard_no]
            lo = max(start - base, 0)
            hi = min(stop - base, self.cumulative_list[shard_no] - base)
            if lo < hi:
                out.append((shard_no, lo, hi))
        return out

    def held(self) -> list[Shard]:
        """The shards this process holds: all of a list, those made so far of a compact
        manifest's (the others hold no handle, map or page)."""
        shards = self.shards
        return shards.made() if isinstance(shards, ManifestShards) else list(shards)

    def url(self, shard_no: int) -> str:
        """The URL of shard ``shard_no``'s data file, as messages name it."""
        shard = self.shards[shard_no]
        return shard.storage.url(shard.path)

    def storages(self) -> list[Storage]:
        """The storages of the data files of the shards this process holds (each shard
        carries its own: a joined dataset's keep their sources'), and :attr:`storage`."""
        found = {id(self.storage): self.storage}
        for shard in self.held():
            found.setdefault(id(shard.storage), shard.storage)
        return list(found.values())

    def infos(self) -> list[ShardInfo]:
        """Path, record count, size and sidecar of every shard."""
        return [ShardInfo(s.storage.url(s.path), s.records, s.size,
                          s.index_storage.url(s.index_path), s.partial)
                for s in self.shards]
