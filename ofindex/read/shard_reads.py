"""Batches read shard by shard: the records grouped by shard, their spans looked up (remote
sidecars by pages, with every missing piece of index fetched in one round: see
:mod:`ofindex.read.index_round`), then read in one of three ways:

* :func:`mapped_cut`: cut straight out of memory maps, checked in bulk with numpy (local files
  without the compiled module);
* :func:`direct_reads`: each payload read straight into its own ``bytes`` (local files read
  with ``pread``, records of 64 KiB or more: cheaper than copying out of a staging buffer);
* :func:`planned_ranges`: neighbours merged into ranges (:func:`ofindex.storage.ranges.coalesce`),
  the ranges fetched at once (concurrently on remote storage) into one buffer, the records cut
  out of it.

Each returns the payloads in the order asked for, every record checked as everywhere else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..storage.ranges import coalesce
from . import mapped_gather
from .index_round import batch_spans
from .payloads import extract_payloads, read_record_direct
from .record_checks import RecordChecks
from .sum_checks import check_many, record_naming
from .table import ShardGroups, ShardTable

#: The shape of the three readers: (table, checks, grouped records, their spans) -> payloads
#: in grouped order.
GroupReader = Callable[[ShardTable, RecordChecks, ShardGroups, np.ndarray, np.ndarray],
                       list[Any]]


def read_grouped(table: ShardTable, checks: RecordChecks, indices: np.ndarray,
                 reader: GroupReader) -> list[Any]:
    """The payloads of records ``indices`` (valid, non-negative), read shard by shard with
    ``reader``, in the order asked for.

    Raises:
        IndexNotFoundError, StaleIndexError, SidecarError, CorruptRecordError,
        RangeReadError: As every read.
    """
    grouped = table.group(indices)
    starts, ends = batch_spans(table.shards, grouped.groups, grouped.local)
    payloads = reader(table, checks, grouped, starts, ends)
    _check_sums(table, checks, grouped, payloads)
    return grouped.restore(payloads)


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


def mapped_cut(table: ShardTable, checks: RecordChecks, grouped: ShardGroups,
               starts: np.ndarray, ends: np.ndarray) -> list[Any]:
    """Payloads cut out of the shards' memory maps, no staging buffer (see the module)."""
    out: list[Any] = []
    for shard_no, lo, hi in grouped.groups:
        shard = table.shards[shard_no]
        buf = table.storage.mapped(shard.path, shard.sidecar.indexed_end)
        assert buf is not None  # the decision found every shard mapped
        out += extract_payloads(buf, starts[lo:hi], ends[lo:hi], checks.format, checks.verify,
                                table.url(shard_no), starts[lo:hi], grouped.local[lo:hi])
    return out


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
    storage, shards, shard_of = table.storage, table.shards, grouped.shard_of
    if max_gap is None:
        max_gap = storage.preferred_gap(shards[0].path)
    plan = coalesce(starts, ends, max_gap, max_read_bytes, files=shard_of)
    sizes = plan.fetch_ends - plan.fetch_starts
    fetch_base = np.cumsum(sizes) - sizes
    buf = storage.read_ranges_concat(
        [shards[f].path for f in plan.fetch_files.tolist()],
        plan.fetch_starts.tolist(), plan.fetch_ends.tolist(),
    )
    item_start = fetch_base[plan.item_fetch] + plan.item_offset
    return extract_payloads(
        buf, item_start, item_start + (ends - starts), checks.format, checks.verify,
        lambda k: storage.url(shards[int(shard_of[k])].path), starts, grouped.local,
    )
