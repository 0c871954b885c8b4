"""Remote files read through the machine's data cache (``cache_dir=`` with
``data_cache_bytes=``, a dataset that fits it: :mod:`ofindex.cache.data`).

A batch is read one of two ways:

* every file the batch touches held whole on local disk and mapped in this process, every
  touched sidecar loaded, the compiled module (and the CRC instruction for CRCs): one
  compiled pass over the blocks' maps, as over local files (a later epoch then reads at
  about the speed of local files, where the block reads below took ~2.5x as long:
  :mod:`ofindex.read.remote.resident_gather`); a record failing a check there is read again as
  below;
* otherwise records are copied from the blocks of the files kept on local disk, the blocks
  missing fetched in one round and kept (at +20 ms RTT a second globally shuffled epoch
  makes no data request: see ``docs/benchmarks.md``;
  :func:`cached_blocks`). The data files' stamps, which key the
  blocks, are asked for in the batch's index round.

One record is a batch of one; iteration streams each shard through the cache.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import numpy as np

from ...cache.data import CachedRead, DataCache
from ...errors import CorruptRecordError
from ...formats.sidecar import Sidecar
from ..batch_source import BatchSource
from ..payloads import DEFAULT_MAX_BYTES, RecordChecks, extract_payloads
from ..remote.resident_gather import ResidentShards, resident_gather
from ..sequential import streaming
from ..shards import Shard
from ..table import ShardGroups, ShardTable
from .ranged import by_storage, planned_ranges, read_grouped
from .shard_access import ShardAccess


@dataclasses.dataclass(frozen=True)
class CachedAccess(ShardAccess):
    """Remote files read through blocks kept on local disk (see the module).

    Attributes:
        native: The compiled module (resident files, and copies out of blocks), or ``None``.
        data_cache: The machine's cache of data blocks.
    """

    data_cache: DataCache

    def read_record(self, table: ShardTable, checks: RecordChecks, shard_no: int, shard: Shard,
                    sidecar: Sidecar, local: int, *, fresh: bool) -> Any:
        """The record read as a batch of one, through the cache (see
        :meth:`ShardAccess.read_record`)."""
        index = np.array([table.first_list[shard_no] + local], dtype=np.int64)
        # (one record's span is read whole whatever the largest merged read)
        return self.read_batch(table, checks, index, max_gap=None,
                               max_read_bytes=DEFAULT_MAX_BYTES)[0]

    def read_batch(self, table: ShardTable, checks: RecordChecks, indices: np.ndarray, *,
                   max_gap: int | None, max_read_bytes: int) -> list[Any]:
        """One compiled pass over files held whole, else copies out of cached blocks (see
        the module and :meth:`ShardAccess.read_batch`)."""
        native, data_cache = self.native, self.data_cache
        if native is not None:
            resident = ResidentShards.of(table, indices, data_cache, checks, native)
            if resident is not None:
                payloads = resident_gather(table, checks, resident, data_cache, native)
                if payloads is not None:
                    return payloads  # (None: a check failed in cached bytes: read below)
        return read_grouped(table, checks, indices, functools.partial(  # blocks are keyed
            cached_blocks, data_cache=data_cache, max_read_bytes=max_read_bytes,  # by stamps
            native=native), stamps_first=True)

    def blocks(self, src: BatchSource, shard_no: int, lo: int, hi: int,
               block_bytes: int = 8 << 20) -> Iterator[list[bytes]]:
        """The shard's records streamed through the cache's blocks."""
        shard = src.table.shards[shard_no]
        yield from streaming.stream_blocks(shard.storage, shard.path, shard.sidecar, lo, hi,
                                           src.checks.verify, block_bytes, self.data_cache,
                                           native=self.native)


def cached_blocks(table: ShardTable, checks: RecordChecks, grouped: ShardGroups,
                  starts: np.ndarray, ends: np.ndarray, *, data_cache: DataCache,
                  max_read_bytes: int, native: ModuleType | None) -> list[Any]:
    """Payloads cut out of blocks of the data files kept on local disk, the missing blocks
    fetched in one round and kept (:mod:`ofindex.cache.data`).

    The records' own spans are copied (no plan: a gap between records costs a copy, not a
    request). When a record's check fails in bytes the cache served, those blocks are
    dropped and the batch is read again from the remote store (a damaged copy costs a
    fetch, never an error nor a wrong record); the error stands when the remote bytes fail
    too.

    Args:
        table: The shards (remote).
        checks: What to check.
        grouped: The records, grouped by shard.
        starts: Their spans' starts (grouped order).
        ends: Their spans' ends.
        data_cache: The machine's cache of data blocks.
        max_read_bytes: Largest merged read, should the batch be read again remotely.
        native: The compiled module that copies and checks the records, or ``None``.
    """
    try:
        return by_storage(table, checks, grouped, starts, ends, functools.partial(
            _cached, data_cache=data_cache, native=native))
    except _DamagedCopy as damaged:
        data_cache.forget(damaged.cached)
    return planned_ranges(table, checks, grouped, starts, ends, max_gap=0,
                          max_read_bytes=max_read_bytes, native=native)


class _DamagedCopy(Exception):
    """A record failed its check in bytes the data cache served (its blocks: ``cached``): a
    signal caught by :func:`cached_blocks`, never raised to a user."""

    def __init__(self, cached: list[Any]) -> None:
        super().__init__("a record failed its check in cached bytes")
        self.cached = cached


def _cached(table: ShardTable, checks: RecordChecks, grouped: ShardGroups,
            starts: np.ndarray, ends: np.ndarray, *, data_cache: DataCache,
            native: ModuleType | None) -> list[Any]:
    """:func:`cached_blocks` of the records of one storage; raises :class:`_DamagedCopy`
    when a record fails its check in cached bytes."""
    shard_numbers, files = np.unique(grouped.shard_of, return_inverse=True)
    shards = table.shards
    storage = shards[grouped.groups[0][0]].storage
    read = data_cache.read(storage, [shards[f].path for f in shard_numbers.tolist()], files,
                           starts, ends, check_blocks=not checks.tfrecord_crcs)
    try:
        sizes = ends - starts - checks.overhead
        if _fillable(checks, sizes, native):
            assert native is not None
            payloads, bad = _fill(checks, read, sizes, native)
            if bad < 0:
                return payloads
        at = np.zeros(len(starts) + 1, dtype=np.int64)  # cut out of the ranges, which also
        np.cumsum(ends - starts, out=at[1:])            # names the record that fails
        return extract_payloads(
            read.buffer(), at[:-1], at[1:], checks.format, checks.verify,
            lambda k: table.url(int(grouped.shard_of[k])), starts, grouped.local, native)
    except CorruptRecordError:
        if not read.cached:
            raise
    raise _DamagedCopy(read.cached)


def _fillable(checks: RecordChecks, sizes: np.ndarray, native: ModuleType | None) -> bool:
    """Whether one compiled pass can copy and check the records straight out of their
    blocks (about twice as fast as cutting them out of the ranges' concatenation): the
    compiled module, and the CRC instruction for CRCs."""
    return (native is not None and len(sizes) > 0 and not bool((sizes < 0).any())
            and not (checks.tfrecord_crcs and not native.hw_crc()))


def _fill(checks: RecordChecks, read: CachedRead, sizes: np.ndarray,
          native: ModuleType) -> tuple[list[Any], int]:
    """The payloads copied and checked by the compiled pass, and the first record that
    failed a check (-1: none; the payloads are then not to be used). A record across
    blocks (or fetched as it is) is joined into a buffer of its own first."""
    plan, views = read.plan, list(read.views)
    slots, offsets = plan.slot, plan.offset
    apart = np.flatnonzero(slots < 0)
    if len(apart):
        slots, offsets = slots.copy(), offsets.copy()
        for k in apart.tolist():
            slots[k], offsets[k] = len(views), 0
            views.append(plan.range_bytes(k, read.begin, read.views, read.fetched))
    outs: list[Any] = native.blank(sizes)
    bad = int(native.fill(views, slots, offsets, outs, 0, len(sizes), checks.header,
                          checks.footer, checks.tfrecord_crcs))
    return outs, bad
