"""Big batches (several MB) copied and CRC-checked on a few threads.

A batch of 256 records of ~100 KB is 25 MB: copying it into ``bytes`` objects and checking
its CRCs on one core takes longer than a columnar gather that checks nothing. Each thread
checks its share of the records and copies them in one compiled call without the GIL
(``ofindex._native.fill``: copy and CRC in one pass over the source, three records at a
time, with the CPU's CRC32C instruction; without it, the copies are checked through the
``crc32c`` package, which releases the GIL too). The calling thread fills one share itself.
Small batches keep the single compiled pass, which is cheaper than starting threads. The
checks and their errors are the serial path's: the first record of the batch (in the order
asked for) that fails is reported, with the same message.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import crc32c as _crc32c
import numpy as np

from .. import _accel
from .._threads import ProcessPool
from ..formats.crc import LENGTH_CRCS, length_crc, unmask_crcs
from ..formats.framing import Buffer, RecordFormat

#: Batches expected to hold at least this many bytes are spread over threads.
PARALLEL_BYTES = 4 << 20
_A4 = np.arange(4)
_T = TypeVar("_T")


#: Threads that copy and check big batches.
_POOL = ProcessPool("ofindex-batch")


def executor() -> cf.ThreadPoolExecutor | None:
    """This process's pool: threads that copy and check big batches (``None`` on one core)."""
    return _POOL.get()


def map_ordered(fn: Callable[[_T], Any], items: Iterable[_T]) -> list[Any]:
    """``[fn(x) for x in items]`` on the pool; the first failing item (in order) raises."""
    pool = executor()
    return [fn(x) for x in items] if pool is None else list(pool.map(fn, items))


def _crcs_wrong(bufs: list[Buffer], which: np.ndarray, starts: np.ndarray,
                sizes: np.ndarray, crcs: np.ndarray) -> np.ndarray:
    """Which TFRecords' stored length CRC or data CRC is wrong (``crcs``: the CRCs computed
    from the payloads); for CPUs without the CRC32C instruction, where the compiled pass
    checks only the framing and stored lengths."""
    wrong = np.zeros(len(starts), dtype=bool)
    for j, buf in enumerate(bufs):
        sel = np.flatnonzero(which == j)
        raw = np.frombuffer(buf, dtype=np.uint8)
        st, size = starts[sel], sizes[sel]
        len_crcs = raw[(st + 8)[:, None] + _A4].copy().view("<u4").ravel()
        ends = st + 12 + size
        data_crcs = unmask_crcs(raw[ends[:, None] + _A4].copy().view("<u4").ravel())
        memo = LENGTH_CRCS.get
        want = np.array([memo(m) or length_crc(m) for m in size.tolist()], dtype=np.uint32)
        wrong[sel] = (len_crcs != want) | (data_crcs != crcs[sel])
    return wrong


def _plan_mapped(reads: Any, idx: np.ndarray) -> tuple[Any, ...] | None:
    """Where the records ``idx`` of memory-mapped shards lie: ``(touched shards, which (an
    index into them per record), local record numbers, their maps, span starts, payload
    sizes)``; ``None`` when the serial path must serve them (a shard that cannot be served
    from its map). The spans come from one compiled pass over the sidecars' offsets.

    Raises:
        SidecarError: A record's span cannot hold a record (corrupt offsets), as serially.
    """
    native = _accel.native
    assert native is not None  # checked by the callers
    shards = reads._mapped_shards(idx)
    if shards is None:
        return None
    touched, which, local, bufs, offsets, iends = shards
    n = len(idx)
    starts = np.empty(n, dtype=np.int64)
    ends = np.empty(n, dtype=np.int64)
    got = native.spans(bufs, offsets, iends, which, local, reads.format.overhead, starts, ends)
    if got is not None:
        problem, k = got
        if problem == _accel.SPAN_TOO_SHORT:  # corrupt offsets: the sidecar names them
            j = int(which[k])
            reads._shards[touched[j]].sidecar.spans(local[which == j])
        return None  # anything else: the serial path reads and reports it
    return touched, which, local, bufs, starts, ends - starts - reads.format.overhead


def _shares(sizes: np.ndarray, workers: int) -> list[tuple[int, int]]:
    """Records ``0..n`` cut into ``workers`` runs of about equal bytes."""
    n = len(sizes)
    bounds = np.searchsorted(np.cumsum(sizes), np.linspace(0, int(sizes.sum()),
                                                           workers + 1)[1:-1])
    return [p for p in zip([0, *bounds.tolist()], [*bounds.tolist(), n], strict=True)
            if p[0] < p[1]]


def _first_failing(work: Callable[[tuple[int, int]], int], parts: list[tuple[int, int]],
                   pool: cf.ThreadPoolExecutor | None, n: int) -> int:
    """Run ``work`` on each share (the calling thread takes the first while the pool runs
    the others); the first record that failed (``work`` returns -1 or that record), or
    ``n`` when none did."""
    later = [pool.submit(work, p) for p in parts[1:]] if pool is not None else []
    results = [work(parts[0]), *(f.result() for f in later)] if parts else []
    return min([b for b in results if b >= 0], default=n)


def _raise_at(reads: Any, k: int, n: int, touched: list[int], which: np.ndarray,
              local: np.ndarray, bufs: list[Buffer]) -> None:
    """Raise the error of record ``k`` of the batch, the first that failed; return when
    ``k == n`` (none did)."""
    if k < n:
        j = int(which[k])
        shard = reads._shards[touched[j]]
        reads._raise_problem(_accel.RECORD_FAILS_CHECK, shard, shard.sidecar, bufs[j],
                             int(local[k]))


def checked_spans(reads: Any, idx: np.ndarray
                  ) -> tuple[list[Buffer], tuple[np.ndarray, np.ndarray, np.ndarray]] | None:
    """Where the payloads of records ``idx`` lie in the maps of their shards, after checking
    the records in place (framing, stored lengths; TFRecord CRCs with ``verify``) on a few
    threads, without copying them: ``(maps, (which map, payload starts, payload ends))``
    per record, in the order asked for.

    Returns ``None`` when the records must be read as ``bytes`` instead (no compiled module,
    a shard not mapped, OFRecord checksums to check, CRCs to check without the CPU's CRC
    instruction, offsets the serial path reports).

    Raises:
        CorruptRecordError: A record fails a check (the first in the order asked for, as
            ``__getitems__`` reports it).
    """
    native = _accel.native
    if (native is None or not len(idx) or not reads._storage.maps_files
            or reads._of_verify or (reads._tf_verify and not native.hw_crc())):
        return None
    plan = _plan_mapped(reads, idx)
    if plan is None:
        return None
    touched, which, local, bufs, starts, sizes = plan
    hs, fs = reads.format.header_size, reads.format.footer_size
    check = reads._tf_verify
    pool = executor() if int(sizes.sum()) >= PARALLEL_BYTES else None
    parts = _shares(sizes, pool._max_workers if pool is not None else 1)

    def work(part: tuple[int, int]) -> int:
        return int(native.fill(bufs, which, starts, sizes, part[0], part[1], hs, fs, check))

    k = _first_failing(work, parts, pool, len(idx))
    _raise_at(reads, k, len(idx), touched, which, local, bufs)
    return bufs, (which, starts + hs, starts + hs + sizes)


def gather_parallel(reads: Any, idx: np.ndarray) -> list[Any] | None:
    """Payloads of records ``idx`` of memory-mapped shards of ``reads`` (a
    :class:`~ofindex.read.gather.BatchReads`), copied and checked on threads, in
    the order asked for; ``None`` when the serial path must serve them (one core, a shard
    that cannot be served from its map, offsets the serial path reports)."""
    native = _accel.native
    pool = executor()
    if native is None or pool is None or len(idx) < 2:
        return None
    n = len(idx)
    plan = _plan_mapped(reads, idx)
    if plan is None:
        return None
    touched, which, local, bufs, starts, sizes = plan
    fmt = reads.format
    tf = fmt is RecordFormat.TFRECORD
    outs = native.blank(sizes)
    check = tf and reads._verify
    in_fill = check and native.hw_crc()  # the CRCs checked in the compiled copy pass
    parts = _shares(sizes, pool._max_workers)
    hs, fs = fmt.header_size, fmt.footer_size
    crcs = np.zeros(n if check and not in_fill else 0, dtype=np.uint32)

    def work(part: tuple[int, int]) -> int:
        if not check or in_fill:
            return int(native.fill(bufs, which, starts, outs, part[0], part[1], hs, fs, check))
        crc = _crc32c.crc32c  # releases the GIL too
        for k in range(*part):  # copy then check one record at a time: it is still in cache
            bad = int(native.fill(bufs, which, starts, outs, k, k + 1, hs, fs, False))
            if bad >= 0:
                return bad
            crcs[k] = crc(outs[k])
        return -1

    k = _first_failing(work, parts, pool, n)  # the first record that fails framing
    if check and not in_fill:  # and the CRCs of the records before it
        wrong = np.flatnonzero(_crcs_wrong(bufs, which[:k], starts[:k], sizes[:k], crcs[:k]))
        k = int(wrong[0]) if len(wrong) else k
    _raise_at(reads, k, n, touched, which, local, bufs)
    payloads: list[Any] = outs
    return payloads
