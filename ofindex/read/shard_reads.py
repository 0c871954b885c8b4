"""Batches read shard by shard: the records grouped by shard, their spans looked up (remote
sidecars by pages, with every missing piece of index fetched in one round: see
:mod:`ofindex.read.index_round`), then read in one of three ways:

* :func:`direct_reads`: each payload read straight into its own ``bytes`` (local files read
  with ``pread``, records of 64 KiB or more: cheaper than copying out of a staging buffer);
* :func:`planned_ranges`: neighbours merged into ranges (:func:`ofindex.storage.ranges.coalesce`),
  the ranges fetched at once (concurrently on remote storage) into one buffer, the records cut
  out of it;
* :func:`cached_blocks`: the same plan served from blocks of the remote files kept on local
  disk (:mod:`ofindex.cache.data`), the missing blocks fetched at once and kept.

Each returns the payloads in the order asked for, every record checked as everywhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import _accel
from ..cache.data import CachedRead, DataCache
from ..errors import CorruptRecordError
from ..formats.framing import Buffer
from ..storage.ranges import ReadPlan, coalesce
from . import mapped_gather
from .index_round import PageRequest, run_round
from .pages import pager_of, spans_from_pages
from .payloads import extract_payloads, read_record_direct
from .record_checks import RecordChecks
from .shards import Shard, missing_indexes
from .sum_checks import check_many, record_naming
from .table import ShardGroups, ShardTable

#: The shape of the readers: (table, checks, grouped records, their spans) -> payloads
#: in grouped order.
GroupReader = Callable[[ShardTable, RecordChecks, ShardGroups, np.ndarray, np.ndarray],
                       list[Any]]


def read_grouped(table: ShardTable, checks: RecordChecks, indices: np.ndarray,
                 reader: GroupReader, *, stamps_first: bool = False) -> list[Any]:
    """The payloads of records ``indices`` (valid, non-negative), read shard by shard with
    ``reader``, in the order asked for (``stamps_first``: see
    :func:`batch_spans`).

    Raises:
        IndexNotFoundError, StaleIndexError, SidecarError, CorruptRecordError,
        RangeReadError: As every read.
    """
    grouped = table.group(indices)
    starts, ends = batch_spans(table.shards, grouped.groups, grouped.local,
                               stamps_first=stamps_first)
    payloads = reader(table, checks, grouped, starts, ends)
    _check_sums(table, checks, grouped, payloads)
    return grouped.restore(payloads)


def batch_spans(shards: Sequence[Shard], groups: list[tuple[int, int, int]],
                local: np.ndarray, *, stamps_first: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Byte spans ``(starts, ends)`` of a batch's records, grouped by shard: from the
    sidecars this process holds, the rest of the index they need fetched in one round
    (:func:`~ofindex.read.index_round.run_round`).

    Args:
        shards: The dataset's shards.
        groups: ``(shard number, lo, hi)``: items ``lo..hi-1`` of ``local`` are in that shard.
        local: Record numbers inside their shard.
        stamps_first: Check the data files' stamps in this round even where the first read
            could (the data is read through a cache that keys blocks by them).

    Returns:
        The framing's byte range of every item.

    Raises:
        IndexNotFoundError, StaleIndexError, SidecarError, RangeReadError: As reads do.
    """
    requests: list[PageRequest | None] = []
    whole: list[Shard] = []
    for shard_no, lo, hi in groups:
        shard = shards[shard_no]
        pager = None if shard.loaded else pager_of(shard)
        requests.append(None if pager is None else PageRequest(shard, pager, local[lo:hi]))
        if pager is None and shard.cache is not None and not shard.loaded:
            whole.append(shard)
    paged = [r for r in requests if r is not None]
    if paged or whole:
        missing = run_round(paged, whole, stamps_first=stamps_first)
        if missing:
            raise missing_indexes(missing, len(whole))
    starts = np.empty(len(local), dtype=np.int64)
    ends = np.empty(len(local), dtype=np.int64)
    for (shard_no, lo, hi), request in zip(groups, requests, strict=True):
        if request is not None and not request.fallback:
            starts[lo:hi], ends[lo:hi] = spans_from_pages(request.shard, request.pager,
                                                          request.pages, request.local)
        else:
            starts[lo:hi], ends[lo:hi] = shards[shard_no].sidecar.spans(local[lo:hi])
    return starts, ends


def _check_sums(table: ShardTable, checks: RecordChecks, grouped: ShardGroups,
                payloads: list[Any]) -> None:
    """Check OFRecord payloads (grouped order) against their sidecars' checksums."""
    if not checks.payload_sums:
        return
    for shard_no, lo, hi in grouped.groups:
        sidecar = table.shards[shard_no].sidecar
        if sidecar.checksums is None:
            continue
        records = grouped.local[lo:hi]
        check_many(payloads[lo:hi], sidecar.checksums[records],
                   record_naming(table.url(shard_no), sidecar.offsets, records))


def direct_reads(table: ShardTable, checks: RecordChecks, grouped: ShardGroups,
                 starts: np.ndarray, ends: np.ndarray) -> list[Any]:
    """Each payload read into its own ``bytes`` (header, payload and footer as three reads),
    on the process's threads when the batch is big (the reads and CRCs release the GIL)."""
    storage, shards = table.storage, table.shards

    def direct(item: tuple[int, int, int, int]) -> bytes:
        shard_no, a, b, r = item
        return read_record_direct(storage, shards[shard_no].path, a, b, checks.format,
                                  checks.verify, r)

    items = list(zip(grouped.shard_of.tolist(), starts.tolist(), ends.tolist(),
                     grouped.local.tolist(), strict=True))
    if int((ends - starts).sum()) >= mapped_gather.PARALLEL_BYTES:
        return mapped_gather.map_ordered(direct, items)
    return [direct(item) for item in items]


def compiled_preads(table: ShardTable, checks: RecordChecks, grouped: ShardGroups,
                    starts: np.ndarray, ends: np.ndarray, *, max_gap: int,
                    otherwise: GroupReader) -> list[Any]:
    """Each payload read straight into its own ``bytes`` by compiled ``preadv`` calls without
    the GIL, neighbours in a file (gaps up to ``max_gap``) in one call, on the process's
    threads when the batch is big; a batch in which a record fails (or a file is shorter than
    its index says) is read again by ``otherwise`` (the way it is read without the compiled
    module), which raises the precise error.

    Args:
        table: The shards (on local storage, read through descriptors).
        checks: What to check (TFRecord CRCs need the CPU's CRC32C instruction here).
        grouped: The records, grouped by shard.
        starts: Their spans' starts (grouped order).
        ends: Their spans' ends.
        max_gap: Largest gap between two records read through rather than split.
        otherwise: Reads a batch the compiled reads could not serve whole.
    """
    native = _accel.native
    assert native is not None  # chosen only with the compiled module
    storage, shards = table.storage, table.shards
    handles = []  # held until the reads are done: their descriptors stay open
    for shard_no, lo, hi in grouped.groups:
        handle = storage.handle(shards[shard_no].path)
        if handle is None or not handle.covers(int(ends[lo:hi].max())):  # shorter than
            return otherwise(table, checks, grouped, starts, ends)  # its index says
        handles.append(handle)
    fds = [handle.fd for handle in handles]
    which = np.repeat(np.arange(len(handles), dtype=np.int64),
                      [hi - lo for _, lo, hi in grouped.groups])
    outs: list[Any] = native.blank(ends - starts - checks.overhead)
    order = np.lexsort((starts, which))  # file order: neighbours read together
    header, footer, verify = checks.header, checks.footer, checks.tfrecord_crcs
    gap = min(max_gap, PREADS_MAX_GAP)

    def work(part: tuple[int, int]) -> int:
        return int(native.preads(fds, which, starts, outs, order, part[0], part[1], header,
                                 footer, verify, gap))

    nbytes = int((ends - starts).sum())
    pool = mapped_gather.executor() if nbytes >= mapped_gather.PARALLEL_BYTES else None
    sizes = (ends - starts)[order]
    parts = mapped_gather.shares(sizes, pool._max_workers if pool is not None else 1)
    if mapped_gather.first_failing(work, parts, pool, len(outs)) < len(outs):
        return otherwise(table, checks, grouped, starts, ends)
    return outs


#: Largest gap compiled_preads reads through (csrc/preads.c's scratch buffer).
PREADS_MAX_GAP = 1 << 16


def planned_ranges(table: ShardTable, checks: RecordChecks, grouped: ShardGroups,
                   starts: np.ndarray, ends: np.ndarray, *, max_gap: int | None,
                   max_read_bytes: int) -> list[Any]:
    """Payloads fetched by a read plan into one buffer and cut out of it (see the module).

    Args:
        table: The shards.
        checks: What to check.
        grouped: The records, grouped by shard.
        starts: Their spans' starts (grouped order).
        ends: Their spans' ends.
        max_gap: Largest gap between two spans read through rather than split (``None``: the
            storage's preferred gap, asked now: the index round of this batch may just have
            learnt that the server answers multi-range requests).
        max_read_bytes: Largest merged read.
    """
    if max_gap is None:
        max_gap = table.storage.preferred_gap(table.shards[0].path)
    plan = coalesce(starts, ends, max_gap, max_read_bytes, files=grouped.shard_of)
    paths = [table.shards[f].path for f in plan.fetch_files.tolist()]
    buf = table.storage.read_ranges_concat(paths, plan.fetch_starts.tolist(),
                                           plan.fetch_ends.tolist())
    return _cut(table, checks, grouped, starts, ends, plan, buf)


def cached_blocks(table: ShardTable, checks: RecordChecks, grouped: ShardGroups,
                  starts: np.ndarray, ends: np.ndarray, *, data_cache: DataCache,
                  max_read_bytes: int) -> list[Any]:
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
    """
    shard_numbers, files = np.unique(grouped.shard_of, return_inverse=True)
    storage, shards = table.storage, table.shards
    read = data_cache.read(storage, [shards[f].path for f in shard_numbers.tolist()], files,
                           starts, ends, check_blocks=not checks.tfrecord_crcs)
    try:
        sizes = ends - starts - checks.overhead
        if _fillable(checks, read, sizes):
            payloads, bad = _fill(checks, read, sizes)
            if bad < 0:
                return payloads
        at = np.zeros(len(starts) + 1, dtype=np.int64)  # cut out of the ranges, which also
        np.cumsum(ends - starts, out=at[1:])            # names the record that fails
        return extract_payloads(
            read.buffer(), at[:-1], at[1:], checks.format, checks.verify,
            lambda k: storage.url(shards[int(grouped.shard_of[k])].path), starts,
            grouped.local)
    except CorruptRecordError:
        if not read.cached:
            raise
    data_cache.forget(read.cached)
    return planned_ranges(table, checks, grouped, starts, ends, max_gap=0,
                          max_read_bytes=max_read_bytes)


def _fillable(checks: RecordChecks, read: CachedRead, sizes: np.ndarray) -> bool:
    """Whether one compiled pass can copy and check the records straight out of their
    blocks (about twice as fast as cutting them out of the ranges' concatenation): the
    compiled module, and the CRC instruction for CRCs."""
    native = _accel.native
    return (native is not None and len(sizes) > 0 and not bool((sizes < 0).any())
            and not (checks.tfrecord_crcs and not native.hw_crc()))


def _fill(checks: RecordChecks, read: CachedRead,
          sizes: np.ndarray) -> tuple[list[Any], int]:
    """The payloads copied and checked by the compiled pass, and the first record that
    failed a check (-1: none; the payloads are then not to be used). A record across
    blocks (or fetched as it is) is joined into a buffer of its own first."""
    native = _accel.native
    assert native is not None
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


def _cut(table: ShardTable, checks: RecordChecks, grouped: ShardGroups, starts: np.ndarray,
         ends: np.ndarray, plan: ReadPlan, buf: Buffer) -> list[Any]:
    """The payloads of a batch cut out of the buffer its plan's reads were fetched into,
    each checked."""
    storage, shards, shard_of = table.storage, table.shards, grouped.shard_of
    sizes = plan.fetch_ends - plan.fetch_starts
    fetch_base = np.cumsum(sizes) - sizes
    item_start = fetch_base[plan.item_fetch] + plan.item_offset
    return extract_payloads(
        buf, item_start, item_start + (ends - starts), checks.format, checks.verify,
        lambda k: storage.url(shards[int(shard_of[k])].path), starts, grouped.local,
    )
