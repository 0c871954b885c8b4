"""How the records of each shard are read: one access per kind, chosen once per shard.

When a shard is bound (its dataset made; or, when only its sidecar's header says whether it
is compressed, its first read in a process), :func:`choose_access` picks the access that
reads it, from the storage of its data file (which the shard carries), its compression, the
dataset's data cache and the compiled module. Every read of the shard then asks that access:
one record (``ds[i]``), a batch (``__getitems__``, slices, arrays), the blocks of a run of
records and the batches of an iteration (``iter_records``, ``iter_batches``); no read
decides again. The accesses, in the order :func:`choose_access` considers them (the first
whose condition holds is taken):

========================  ===============================================================
access                    condition, and the measurement behind it
========================  ===============================================================
:class:`InflatingAccess`  the shard is gzip/zlib compressed: records are inflated from
                          their seek points, piece by piece (its own uncompressed
                          neighbours in the dataset are read by the accesses below).
:class:`MappedAccess`     local storage that maps files (``mmap=True``, the default) and the
                          compiled module: one compiled pass over the maps in the order
                          asked for (about 1.5x the random-access speed of ``pread``); a
                          batch of >= 4 MiB copied and checked on threads without the GIL
                          (256 random records of ~100 KB: 1.6x Hugging Face's Arrow
                          gather). The compiled module alone reads maps, in guarded calls:
                          a file truncated or rewritten in place under its map raises
                          :class:`~ofindex.errors.StaleIndexError` naming it.
:class:`DescriptorAccess` local files otherwise (``mmap=False``; or no compiled module,
                          since Python cannot guard its reads of a map): with the compiled
                          module each payload read by ``preadv`` into its own ``bytes``
                          with the GIL released (256 x 100 KB: 25 k records per CPU
                          second, 10-11 k through Python-level ``pread`` calls; 1.6x
                          ArrayRecord's ``__getitems__``); without it records of 64 KiB or
                          more read one by one, smaller ones by planned ranges.
:class:`CachedAccess`     remote files and a data cache (``cache_dir=`` with
                          ``data_cache_bytes=``, a dataset that fits it): records copied
                          from blocks of the files kept on local disk, the missing blocks
                          fetched in one round (at +20 ms RTT a second globally shuffled
                          epoch makes no data request); files held whole are cut by one
                          compiled pass (a later epoch at about the speed of local files,
                          where the block reads took ~2.5x as long).
:class:`RangedAccess`     remote files otherwise: neighbours merged into ranges, fetched at
                          once (concurrently, as multi-range requests over HTTP), records cut
                          out of one buffer: two rounds cold, one once the index pages are
                          cached.
========================  ===============================================================

Every access checks every record the same way (stored length against the index; TFRecord
CRCs and OFRecord sidecar checksums with ``verify``) and reports the first bad record of a
batch in the order asked for; the tests hold each access to the others' results. Each
module's docstring tells how its access reads, and the measurements behind its own choices
(threads for big batches; files held whole in the data cache).

**Without the compiled module** (not built at install: no C compiler; or
``OFINDEX_PURE_PYTHON=1``), the same accesses read with the pure-Python loops (``native`` is
``None``), with the same results and errors, slower: local files through descriptors, since
only compiled calls can guard the reads of a map. The pure-Python loops are this fallback and
the test oracle of the compiled ones (the tests run both), not a second set of choices.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from ... import _accel
from ...cache.data import DataCache, same_cache
from ...formats.sidecar_header import Compression
from ...storage import Storage, openfiles
from ..batch_source import BatchSource
from ..manifest_shards import ManifestShards
from ..payloads import RecordChecks
from ..remote.index_round import load_sidecars
from ..shards import Shard
from ..table import ShardTable
from .cached import CachedAccess
from .descriptors import DescriptorAccess
from .inflating import InflatingAccess
from .maps import MappedAccess
from .ranged import RangedAccess
from .shard_access import ShardAccess

__all__ = ["CachedAccess", "DescriptorAccess", "InflatingAccess", "MappedAccess",
           "RangedAccess", "ShardAccess", "ShardAccesses", "choose_access"]


def choose_access(storage: Storage, *, compressed: bool, data_cache: DataCache | None,
                  native: ModuleType | None) -> ShardAccess:
    """The access that reads a shard: the one decision of how records are read (see the
    module's table).

    Args:
        storage: The storage of the shard's data file.
        compressed: Whether the shard is gzip/zlib compressed.
        data_cache: The dataset's cache of remote data blocks, or ``None``.
        native: The compiled module, or ``None`` (the pure-Python loops).

    Returns:
        The access (equal accesses read alike: they may read one batch together).
    """
    if compressed:
        return InflatingAccess(native)
    if storage.is_local:
        if storage.can_mmap and native is not None:
            return MappedAccess(native, DescriptorAccess(native))
        return DescriptorAccess(native)
    if data_cache is not None:
        return CachedAccess(native, data_cache)
    return RangedAccess(native)


class ShardAccesses:
    """The access of every shard of a dataset, each chosen once (:func:`choose_access`).

    When no shard is compressed and every shard's storage calls for the same access, that
    access reads every shard (:attr:`uniform`: the usual case, decided when the dataset is
    made). Otherwise each shard is bound on its first read in a process, when its sidecar's
    header is there (a batch's unbound shards have their sidecars loaded in one round).

    Args:
        shards: The dataset's shards (each carries the storage of its data file).
        compressed: Whether a shard may be compressed (its header then says).
        data_cache: The machine's cache of remote data blocks the dataset reads through, or
            ``None``.
    """

    def __init__(self, shards: Sequence[Shard], *, compressed: bool,
                 data_cache: DataCache | None) -> None:
        self._shards = shards
        self.compressed = compressed
        #: The machine's cache of remote data blocks the shards are read through, or ``None``.
        self.data_cache = data_cache
        #: The sources' accesses, by their first shard, for a joined dataset's (else empty).
        self._parts: list[tuple[int, ShardAccesses]] = []
        self._begin()

    def _begin(self) -> None:
        """Choose (again, in a new process) what can be chosen now."""
        self.native = _accel.native
        #: Shards one read holds at once (:func:`ofindex.storage.openfiles.limits`), taken
        #: when the accesses are chosen: a batch does not ask the process's limit again.
        self.per_read = openfiles.limits().per_read
        self._bound: dict[int, ShardAccess] = {}
        #: The access of every shard when they all read alike, or ``None``.
        self.uniform: ShardAccess | None = None
        if self._parts:
            chosen = [part.uniform for _, part in self._parts]
            first = chosen[0]
            if first is not None and all(access == first for access in chosen):
                self.uniform = first
        elif not self.compressed:
            shards = self._shards
            storages: dict[int, Storage] = {}
            if isinstance(shards, ManifestShards):
                storages[id(shards.storage)] = shards.storage
            else:
                for shard in shards:
                    storages.setdefault(id(shard.storage), shard.storage)
            for storage in storages.values():  # (loops, not comprehensions: each is a call)
                kind = choose_access(storage, compressed=False, data_cache=self.data_cache,
                                     native=self.native)
                if self.uniform is not None and kind != self.uniform:
                    self.uniform = None
                    break
                self.uniform = kind

    @classmethod
    def joined(cls, parts: Sequence[ShardAccesses]) -> ShardAccesses:
        """The accesses of datasets' shards one after the other (a joined dataset's): each
        shard keeps the access its own dataset binds it to.

        Args:
            parts: Each dataset's accesses, in order.

        Returns:
            The joined accesses.
        """
        shards = [shard for part in parts for shard in part._shards]
        joined = cls.__new__(cls)
        joined._shards = shards
        joined.compressed = any(part.compressed for part in parts)
        joined.data_cache = same_cache([part.data_cache for part in parts])
        firsts = np.cumsum([0, *[len(part._shards) for part in parts[:-1]]]).tolist()
        joined._parts = list(zip(firsts, parts, strict=True))
        joined._begin()
        return joined

    def __getstate__(self) -> dict[str, Any]:
        return {"_shards": self._shards, "compressed": self.compressed,
                "data_cache": self.data_cache, "_parts": self._parts}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._begin()  # bound afresh in this process

    def data_caches(self) -> list[DataCache]:
        """Every data cache the shards are read through (a joined dataset's sources may
        each have theirs)."""
        found = {id(part_cache): part_cache for _, part in self._parts
                 for part_cache in part.data_caches()}
        if self.data_cache is not None:
            found.setdefault(id(self.data_cache), self.data_cache)
        return list(found.values())

    def of(self, shard_no: int) -> ShardAccess:
        """The access of shard ``shard_no`` (bound now when it was not: its header may be
        read).

        Raises:
            IndexNotFoundError, StaleIndexError, SidecarError: Its header cannot be read.
        """
        uniform = self.uniform
        if uniform is not None:
            return uniform
        bound = self._bound.get(shard_no)
        if bound is None:
            bound = self._bound[shard_no] = self._bind(shard_no)
        return bound

    def _bind(self, shard_no: int) -> ShardAccess:
        """Choose shard ``shard_no``'s access (its own dataset's, in a joined one)."""
        if self._parts:
            j = bisect.bisect_right([first for first, _ in self._parts], shard_no) - 1
            first, part = self._parts[j]
            return part.of(shard_no - first)
        shard = self._shards[shard_no]
        compressed = self.compressed and shard.header.compression is not Compression.NONE
        return choose_access(shard.storage, compressed=compressed, data_cache=self.data_cache,
                             native=self.native)

    def read_batch(self, table: ShardTable, checks: RecordChecks, indices: np.ndarray, *,
                   max_gap: int | None, max_read_bytes: int) -> list[Any]:
        """The payloads of records ``indices`` (valid, non-negative), in that order, each read
        by its shard's access.

        A batch over more shards than a read may hold at once (:attr:`per_read`) is read in
        consecutive parts: the first bad record in the order asked for is still the one
        reported.

        Args:
            table: The dataset's shards.
            checks: What to check in each record.
            indices: The records.
            max_gap: Planned reads: largest gap read through rather than split (``None``: the
                storage's preferred gap when the ranges are planned).
            max_read_bytes: Planned reads: largest merged read.

        Raises:
            CorruptRecordError, SidecarError, StaleIndexError, RangeReadError: As every read.
        """
        pieces = table.pieces(indices, self.per_read) if len(indices) > 2 else None
        if pieces is None:
            return self._read(table, checks, indices, max_gap, max_read_bytes)
        return [payload for lo, hi in pieces
                for payload in self._read(table, checks, indices[lo:hi], max_gap,
                                          max_read_bytes)]

    def _read(self, table: ShardTable, checks: RecordChecks, indices: np.ndarray,
              max_gap: int | None, max_read_bytes: int) -> list[Any]:
        """:meth:`read_batch` of a batch over at most the shards a read may hold at once."""
        uniform = self.uniform
        if uniform is not None:
            return uniform.read_batch(table, checks, indices, max_gap=max_gap,
                                      max_read_bytes=max_read_bytes)
        groups = self._split(table, indices)
        if len(groups) == 1:
            return groups[0][0].read_batch(table, checks, indices, max_gap=max_gap,
                                           max_read_bytes=max_read_bytes)
        out = np.empty(len(indices), dtype=object)
        for access, positions in groups:
            got = access.read_batch(table, checks, indices[positions], max_gap=max_gap,
                                    max_read_bytes=max_read_bytes)
            holder = np.empty(len(got), dtype=object)
            holder[:] = got
            out[positions] = holder
        return list(out.tolist())

    def _split(self, table: ShardTable,
               indices: np.ndarray) -> list[tuple[ShardAccess, np.ndarray]]:
        """The batch's records grouped by their shards' accesses (equal accesses together):
        ``(access, positions in the batch)``, in the order of the shards."""
        touched, which, _ = table.touched(indices)
        if self.compressed:  # the headers say which shards are compressed, and those are
            load_sidecars([table.shards[k] for k in touched])  # read whole: one round
        groups: dict[ShardAccess, list[int]] = {}
        for j, shard_no in enumerate(touched):
            groups.setdefault(self.of(shard_no), []).append(j)
        if len(groups) == 1:
            return [(next(iter(groups)), np.arange(len(indices)))]
        return [(access, np.flatnonzero(np.isin(which, members)))
                for access, members in groups.items()]

    def iter_batches(self, src: BatchSource, batch_size: int, start: int, stop: int,
                     as_buffer: bool, block_bytes: int) -> Iterator[Any]:
        """The batches of records ``start..stop-1`` (valid): made by the access of every
        shard when they all read alike and it has its own way (memory maps), else regrouped
        from the blocks each shard's access streams (see :meth:`ofindex.read.dataset.
        Dataset.iter_batches` for the arguments)."""
        uniform = self.uniform
        if uniform is not None:
            own = uniform.iter_batches(src, batch_size, start, stop, as_buffer, self.streamed)
            if own is not None:
                return own
        return self._regrouped(src, batch_size, start, stop, as_buffer, block_bytes)

    def _regrouped(self, src: BatchSource, batch_size: int, start: int, stop: int,
                   as_buffer: bool, block_bytes: int) -> Iterator[Any]:
        """Batches regrouped from the blocks each shard's access streams."""
        pending: list[Any] = []
        first = start
        for shard_no, lo, hi in src.table.runs(start, stop):
            for block in self.of(shard_no).blocks(src, shard_no, lo, hi, block_bytes):
                pending += block
                k = 0
                while len(pending) - k >= batch_size:
                    yield src.finish(pending[k:k + batch_size], first, as_buffer)
                    first += batch_size
                    k += batch_size
                del pending[:k]
        if pending:
            yield src.finish(pending, first, as_buffer)

    def streamed(self, src: BatchSource, a: int, b: int) -> list[bytes]:
        """Payloads of records ``a..b-1`` streamed by their shards' accesses (for a run the
        maps cannot serve: a file shorter than its index says)."""
        out: list[bytes] = []
        for shard_no, lo, hi in src.table.runs(a, b):
            for block in self.of(shard_no).blocks(src, shard_no, lo, hi):
                out += block
        return out
