"""Batches cut out of memory-mapped shards by the compiled module.

Three ways, all over the same :class:`MappedShards` (the maps and sidecar offsets of the
shards a batch touches):

* :func:`compiled_gather`: one compiled pass in the order asked for (no sorting): each span
  is looked up, checked (stored length against the index; TFRecord CRCs with ``verify``)
  and copied into a ``bytes``;
* :func:`threaded_copies`: big batches (several MB). 256 records of ~100 KB are 25 MB:
  copying them into ``bytes`` and checking their CRCs on one core takes longer than a
  columnar gather that checks nothing, so each thread checks and copies its share of the
  records in one compiled call without the GIL (``fill``: copy and CRC in one pass over the
  source, three records at a time, with the CPU's CRC32C instruction, which TFRecord CRCs
  need here). The calling thread fills one share itself;
* :func:`checked_spans`: the records checked in place on a few threads, not copied: where
  their payloads lie, for readers that copy only parts of them (batched decoding).

Whichever way, the first record of the batch (in the order asked for) that fails a check is
reported, with the same error as every other read path. Every byte of a map is read by the
compiled module, in guarded calls: a map whose file shrank (truncated or rewritten in place)
raises :class:`~ofindex.errors.StaleIndexError` naming the file, never SIGBUS.

What the speed of big batches depends on (256 random records of ~100 KB, measured): a fresh
map faults its page tables in as records are first touched (7,100 minor faults for the first
batch, ~520 for the next, none once every page was touched: twice the CPU per batch until
then); glibc would hand each batch's freed memory back to the system (``blank`` keeps it: no
faults per batch in any process state measured); once TensorFlow, ArrayRecord and Hugging
Face ``datasets`` had run in the same process, these batches cost the same CPU (45-48 k
records per CPU second) while Hugging Face's Arrow gather went from 46-48 k to 26-32 k. Per
CPU second the two are about even (both read each record from memory once): the lead comes
from the second core, and shrinks when other work holds it.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any, NoReturn, TypeVar

import crc32c as _crc32c
import numpy as np

from .. import _accel
from .._threads import ProcessPool
from ..formats.crc import LENGTH_CRCS, unmask_crcs
from ..formats.framing import Buffer
from .payloads import RecordChecks, raise_record_error
from .sum_checks import check_many, record_naming
from .table import ShardTable

#: Batches expected to hold at least this many bytes are spread over threads.
PARALLEL_BYTES = 4 << 20
#: ``fill``'s verify that checks a TFRecord's length CRC and leaves its data CRC to the
#: caller (``checked_spans`` with ``defer_crcs``).
LENGTH_CRC_ONLY = 2
_T = TypeVar("_T")

#: Threads that copy and check big batches.
_POOL = ProcessPool("ofindex-batch")


def executor() -> cf.ThreadPoolExecutor | None:
    """This process's pool: threads that copy and check big batches (``None`` on one core)."""
    return _POOL.get()


def pool_shares() -> int:
    """How many shares a big batch is cut into: one per thread of the pool (which the
    calling thread joins), 1 without a pool."""
    return _POOL.workers


def map_ordered(fn: Callable[[_T], Any], items: Iterable[_T]) -> list[Any]:
    """``[fn(x) for x in items]`` on the pool; the first failing item (in order) raises."""
    pool = executor()
    return [fn(x) for x in items] if pool is None else list(pool.map(fn, items))


@dataclasses.dataclass(frozen=True)
class MappedShards:
    """The memory-mapped shards of a batch, each mapped at least up to its indexed end.

    Attributes:
        touched: The shard numbers.
        which: Per record of the batch, its shard as an index into ``touched`` (int64).
        local: Per record, its number inside its shard.
        maps: Each touched shard's map.
        offsets: Each touched shard's sidecar offsets.
        indexed_ends: Each touched shard's indexed end.
    """

    touched: list[int]
    which: np.ndarray
    local: np.ndarray
    maps: list[Buffer]
    offsets: list[np.ndarray]
    indexed_ends: list[int]

    @classmethod
    def of(cls, table: ShardTable, indices: np.ndarray) -> MappedShards | None:
        """The maps of the shards records ``indices`` (valid, non-negative) are in, or
        ``None`` when one cannot be served from its map (its file is shorter than its index
        says: the planned reads then read it, and report what is wrong)."""
        touched, which, local = table.touched(indices)
        maps: list[Buffer] = []
        offsets: list[np.ndarray] = []
        ends: list[int] = []
        for shard_no in touched:
            shard = table.shards[shard_no]
            sidecar = shard.sidecar
            mapped = shard.storage.mapped(shard.path, sidecar.indexed_end)
            if mapped is None:
                return None
            maps.append(mapped)
            offsets.append(sidecar.offsets)
            ends.append(sidecar.indexed_end)
        return cls(touched, which, local, maps, offsets, ends)

    def items_of(self, j: int) -> np.ndarray | None:
        """The batch positions of touched shard ``j`` (``None``: all, the only shard)."""
        return None if len(self.touched) == 1 else np.flatnonzero(self.which == j)


def raise_mapped_problem(table: ShardTable, checks: RecordChecks, maps: MappedShards,
                         k: int, problem: int, native: ModuleType) -> NoReturn:
    """Raise the precise error for record ``k`` of a batch, which the compiled module
    ``native`` refused with ``problem`` (see :mod:`ofindex._accel`)."""
    j = int(maps.which[k])
    shard = table.shards[maps.touched[j]]
    sidecar, record = shard.sidecar, int(maps.local[k])
    if problem == _accel.RECORD_FAILS_CHECK:  # a corrupt sidecar explains a bad record:
        for jj, shard_no in enumerate(maps.touched):  # report it first
            table.shards[shard_no].sidecar.spans(maps.local[maps.which == jj])
    start, end = sidecar.span(record)
    if problem == _accel.SPAN_TOO_SHORT:
        raise sidecar.bad_span(record, start, end)
    raise_record_error(native.copy_out(maps.maps[j], start, end), checks.format,
                       checks.verify, path=table.url(maps.touched[j]), offset=start,
                       record=record)


def check_mapped_sums(table: ShardTable, checks: RecordChecks, maps: MappedShards,
                      payloads: list[Any]) -> None:
    """Check OFRecord payloads (in batch order) against their sidecars' checksums."""
    if not checks.payload_sums:
        return
    for j, shard_no in enumerate(maps.touched):
        sidecar = table.shards[shard_no].sidecar
        if sidecar.checksums is None:
            continue
        items = maps.items_of(j)
        chosen = payloads if items is None else [payloads[k] for k in items.tolist()]
        records = maps.local if items is None else maps.local[items]
        check_many(chosen, sidecar.checksums[records],
                   record_naming(table.url(shard_no), sidecar.offsets, records))


def compiled_gather(table: ShardTable, checks: RecordChecks, maps: MappedShards,
                    native: ModuleType) -> list[Any]:
    """The payloads of a batch in one pass of the compiled module ``native`` over the maps,
    in the order asked for.

    Raises:
        CorruptRecordError, SidecarError: The first record that fails a check.
    """
    got = native.gather(maps.maps, maps.offsets, maps.indexed_ends, maps.which, maps.local,
                        checks.header, checks.footer, checks.tfrecord_crcs, _crc32c.crc32c,
                        LENGTH_CRCS)
    if isinstance(got, list):
        check_mapped_sums(table, checks, maps, got)
        return got
    problem, k = got  # never past a map: each covers its shard's indexed end
    raise_mapped_problem(table, checks, maps, k, problem, native)


def _spans(table: ShardTable, checks: RecordChecks, maps: MappedShards,
           native: ModuleType) -> tuple[np.ndarray, np.ndarray]:
    """Where each record's framing starts and its payload's size, from one compiled pass
    over the sidecars' offsets.

    Raises:
        SidecarError: A record's span cannot hold a record (corrupt offsets).
    """
    n = len(maps.which)
    starts = np.empty(n, dtype=np.int64)
    ends = np.empty(n, dtype=np.int64)
    got = native.spans(maps.maps, maps.offsets, maps.indexed_ends, maps.which, maps.local,
                       checks.overhead, starts, ends)
    if got is not None:
        problem, k = got
        raise_mapped_problem(table, checks, maps, k, problem, native)
    return starts, ends - starts - checks.overhead


def shares(sizes: np.ndarray, workers: int) -> list[tuple[int, int]]:
    """Records ``0..n`` cut into ``workers`` runs of about equal bytes."""
    n = len(sizes)
    bounds = np.searchsorted(np.cumsum(sizes), np.linspace(0, int(sizes.sum()),
                                                           workers + 1)[1:-1])
    return [p for p in zip([0, *bounds.tolist()], [*bounds.tolist(), n], strict=True)
            if p[0] < p[1]]


def first_failing(work: Callable[[tuple[int, int]], int], parts: list[tuple[int, int]],
                   pool: cf.ThreadPoolExecutor | None, n: int) -> int:
    """Run ``work`` on each share (the calling thread takes the first while the pool runs
    the others); the first record that failed (``work`` returns -1 or that record), or
    ``n`` when none did."""
    later = [pool.submit(work, p) for p in parts[1:]] if pool is not None else []
    results = [work(parts[0]), *(f.result() for f in later)] if parts else []
    return min([b for b in results if b >= 0], default=n)


def threaded_copies(table: ShardTable, checks: RecordChecks, maps: MappedShards,
                    native: ModuleType) -> list[Any]:
    """The payloads of a big batch, copied and checked by the compiled module ``native`` on
    the process's threads, in the order asked for (see the module's notes). On one core the
    calling thread copies them all, still into ``blank``'s memory, which glibc keeps for the
    next batch (through ``compiled_gather`` a process held to one core took a page fault per
    4 KiB of every batch: 1,360 a batch of 64 records of 100 KB, none this way).

    Raises:
        CorruptRecordError, SidecarError: The first record that fails a check.
    """
    pool = executor()
    assert not checks.tfrecord_crcs or native.hw_crc()  # (and with the CRC instruction)
    n = len(maps.which)
    starts, sizes = _spans(table, checks, maps, native)
    outs = native.blank(sizes)
    parts = shares(sizes, pool_shares())
    header, footer, check = checks.header, checks.footer, checks.tfrecord_crcs

    def work(part: tuple[int, int]) -> int:
        return int(native.fill(maps.maps, maps.which, starts, outs, part[0], part[1],
                               header, footer, check))

    k = first_failing(work, parts, pool, n)  # the first record that fails a check
    if k < n:
        raise_mapped_problem(table, checks, maps, k, _accel.RECORD_FAILS_CHECK, native)
    payloads: list[Any] = outs
    check_mapped_sums(table, checks, maps, payloads)
    return payloads


@dataclasses.dataclass(frozen=True)
class MappedSpans:
    """Where the checked payloads of a batch lie in the maps of their shards.

    Attributes:
        maps: The maps of the shards the batch touches.
        which: Per record, its map (an index into ``maps``, int64).
        starts: Per record, where its payload starts in its map.
        ends: Per record, where its payload ends.
    """

    maps: list[Buffer]
    which: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    deferred: MappedShards | None = None
    """The batch's shards when its payloads' TFRecord CRCs were left to the caller
    (``defer_crcs``): :func:`check_deferred` checks the CRCs it computed."""


def checked_spans(table: ShardTable, checks: RecordChecks, maps: MappedShards,
                  native: ModuleType, defer_crcs: bool = False) -> MappedSpans | None:
    """The records of a batch checked in place by the compiled module ``native``
    (framing, stored lengths; TFRecord CRCs with ``verify``) on a few threads, without
    copying them: where their payloads lie. With ``defer_crcs``, a TFRecord's data CRC is
    left to the caller, which sums the payloads in a pass of its own and checks them with
    :func:`check_deferred` (its length CRC is checked here).

    Returns:
        The spans, or ``None`` when the records must be read as ``bytes`` instead (OFRecord
        checksums to check, CRCs to check without the CPU's CRC instruction).

    Raises:
        CorruptRecordError, SidecarError: The first record (in the order asked for) that
            fails a check, as ``__getitems__`` reports it.
    """
    if (not len(maps.which) or checks.payload_sums
            or (checks.tfrecord_crcs and not native.hw_crc())):
        return None
    starts, sizes = _spans(table, checks, maps, native)
    pool = executor() if int(sizes.sum()) >= PARALLEL_BYTES else None
    parts = shares(sizes, pool_shares() if pool is not None else 1)
    header, footer = checks.header, checks.footer
    deferred = defer_crcs and checks.tfrecord_crcs
    check = LENGTH_CRC_ONLY if deferred else int(checks.tfrecord_crcs)

    def work(part: tuple[int, int]) -> int:
        return int(native.fill(maps.maps, maps.which, starts, sizes, part[0], part[1],
                               header, footer, check))

    k = first_failing(work, parts, pool, len(maps.which))
    if k < len(maps.which):
        raise_mapped_problem(table, checks, maps, k, _accel.RECORD_FAILS_CHECK, native)
    return MappedSpans(maps.maps, maps.which, starts + header, starts + header + sizes,
                       maps if deferred else None)


def check_deferred(table: ShardTable, checks: RecordChecks, spans: MappedSpans,
                   crcs: np.ndarray, native: ModuleType) -> None:
    """Check the CRC-32Cs the caller computed of the payloads of ``spans`` (from
    :func:`checked_spans` with ``defer_crcs``) against the CRCs stored after them.

    Raises:
        CorruptRecordError, SidecarError: The first record (in the order asked for) whose
            CRC differs, as ``__getitems__`` reports it.
    """
    maps = spans.deferred
    if maps is None:
        return
    stored = np.empty(4 * len(spans.which), dtype=np.uint8)
    footers = (spans.which, spans.ends, spans.ends + 4)
    native.gather_spans(maps.maps, np.zeros(len(spans.which), np.int64),
                        np.full(len(spans.which), 4, np.int64), stored, footers)
    wrong = np.flatnonzero(unmask_crcs(stored.view("<u4")) != np.asarray(crcs, np.uint32))
    if len(wrong):
        raise_mapped_problem(table, checks, maps, int(wrong[0]), _accel.RECORD_FAILS_CHECK,
                             native)
