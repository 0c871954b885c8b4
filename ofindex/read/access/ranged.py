"""Remote files read with range requests; and what every access that reads a batch shard
by shard shares (:func:`read_grouped`: the descriptor and cached accesses too).

A batch's records are grouped by shard; one index round fetches the sidecar pages (or whole
sidecars) and data stamps the batch lacks (:func:`batch_spans`, :mod:`ofindex.read.
index_round`); then neighbours are merged into ranges (:func:`ofindex.read.payloads.
coalesce`) and fetched at once (concurrently, as multi-range requests over HTTP), the
records cut out of one buffer and checked (:func:`planned_ranges`): two rounds cold, one
once the pages are cached. One record of a shard whose sidecar is loaded is one range
request; iteration streams each shard with large requests, the next one in flight while
this one is cut. Every way returns the payloads in the order asked for, every record checked
as everywhere else.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from ...formats.framing import Buffer
from ...formats.sidecar import Sidecar
from .. import mapped_gather
from ..payloads import ReadPlan, RecordChecks, coalesce, extract_payloads
from ..remote.index_round import PageRequest, run_round
from ..remote.pages import pager_of, spans_from_pages
from ..shards import Shard, missing_indexes
from ..sum_checks import check_many, record_naming
from ..table import ShardGroups, ShardTable
from .shard_access import ShardAccess


@dataclasses.dataclass(frozen=True)
class RangedAccess(ShardAccess):
    """Remote files read with planned range requests (see the module).

    Attributes:
        native: The compiled module that cuts and checks the records, or ``None``.
    """

    def read_batch(self, table: ShardTable, checks: RecordChecks, indices: np.ndarray, *,
                   max_gap: int | None, max_read_bytes: int) -> list[Any]:
        """One index round for what the batch lacks, then one round of range requests (see
        :meth:`ShardAccess.read_batch`)."""
        return read_grouped(table, checks, indices, functools.partial(
            planned_ranges, max_gap=max_gap, max_read_bytes=max_read_bytes, native=self.native))


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
    (:func:`~ofindex.read.remote.index_round.run_round`).

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
    held: list[Sidecar | None] = []
    pid = os.getpid()
    for shard_no, lo, hi in groups:
        shard = shards[shard_no]
        ready = shard.ready
        if ready is not None and ready[0] == pid:  # loaded in this process: no round
            shard.used = True
            held.append(ready[1])
            requests.append(None)
            continue
        held.append(None)
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
    for (shard_no, lo, hi), request, sidecar in zip(groups, requests, held, strict=True):
        if request is not None and not request.fallback:
            starts[lo:hi], ends[lo:hi] = spans_from_pages(request.shard, request.pager,
                                                          request.pages, request.local)
        else:
            if sidecar is None:
                sidecar = shards[shard_no].sidecar
            starts[lo:hi], ends[lo:hi] = sidecar.spans(local[lo:hi])
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


def planned_ranges(table: ShardTable, checks: RecordChecks, grouped: ShardGroups,
                   starts: np.ndarray, ends: np.ndarray, *, max_gap: int | None,
                   max_read_bytes: int, native: ModuleType | None) -> list[Any]:
    """Payloads fetched by a read plan into one buffer and cut out of it (see the module);
    shards on several storages (a joined dataset's) are read storage by storage, at once.

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
        native: The compiled module that cuts the records out, or ``None``.
    """
    shards = table.shards
    first = shards[grouped.groups[0][0]]
    storage = first.storage
    for shard_no, _, _ in grouped.groups:
        if shards[shard_no].storage is not storage:
            return by_storage(table, checks, grouped, starts, ends, functools.partial(
                planned_ranges, max_gap=max_gap, max_read_bytes=max_read_bytes, native=native))
    gap = storage.preferred_gap(first.path) if max_gap is None else max_gap
    plan = coalesce(starts, ends, gap, max_read_bytes, files=grouped.shard_of)
    paths = [shards[f].path for f in plan.fetch_files.tolist()]
    buf = storage.read_ranges_concat(paths, plan.fetch_starts.tolist(), plan.fetch_ends.tolist())
    return _cut(table, checks, grouped, starts, ends, plan, buf, native)


def by_storage(table: ShardTable, checks: RecordChecks, grouped: ShardGroups,
               starts: np.ndarray, ends: np.ndarray, read: GroupReader) -> list[Any]:
    """``read`` the records of each storage the batch's shards are on (one, but for a joined
    dataset's batch over several sources: the storages at once, on the process's threads).

    Returns:
        The payloads, in grouped order.
    """
    shards = table.shards
    parts: dict[int, list[int]] = {}
    for g, (shard_no, _, _) in enumerate(grouped.groups):
        parts.setdefault(id(shards[shard_no].storage), []).append(g)
    if len(parts) == 1:
        return read(table, checks, grouped, starts, ends)
    jobs = []
    for members in parts.values():
        picked = np.concatenate([np.arange(grouped.groups[g][1], grouped.groups[g][2])
                                 for g in members])
        groups, at = [], 0
        for g in members:
            shard_no, lo, hi = grouped.groups[g]
            groups.append((shard_no, at, at + hi - lo))
            at += hi - lo
        jobs.append((ShardGroups(None, grouped.shard_of[picked], grouped.local[picked], groups),
                     picked))
    got = mapped_gather.map_ordered(
        lambda job: read(table, checks, job[0], starts[job[1]], ends[job[1]]), jobs)
    out = np.empty(len(starts), dtype=object)
    for (_, picked), payloads in zip(jobs, got, strict=True):
        holder = np.empty(len(payloads), dtype=object)
        holder[:] = payloads
        out[picked] = holder
    return list(out.tolist())


def _cut(table: ShardTable, checks: RecordChecks, grouped: ShardGroups, starts: np.ndarray,
         ends: np.ndarray, plan: ReadPlan, buf: Buffer, native: ModuleType | None) -> list[Any]:
    """The payloads of a batch cut out of the buffer its plan's reads were fetched into,
    each checked."""
    shard_of = grouped.shard_of
    sizes = plan.fetch_ends - plan.fetch_starts
    fetch_base = np.cumsum(sizes) - sizes
    item_start = fetch_base[plan.item_fetch] + plan.item_offset
    return extract_payloads(
        buf, item_start, item_start + (ends - starts), checks.format, checks.verify,
        lambda k: table.url(int(shard_of[k])), starts, grouped.local, native,
    )
