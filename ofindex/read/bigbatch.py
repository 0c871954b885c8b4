"""Big batches (several MB) copied and CRC-checked on a few threads.

A batch of 256 records of ~100 KB is 25 MB: copying it into ``bytes`` objects and checking
its CRCs on one core takes longer than a columnar gather that checks nothing. Each thread
copies its share of the records and computes their CRCs in one compiled call without the GIL
(``ofindex._native.fill``, with the CPU's CRC32C instruction; without it, the ``crc32c``
package, which releases the GIL too). Small batches keep the single compiled pass, which is
cheaper than starting threads. The checks and their errors are the serial path's: the first
record of the batch (in the order asked for) that fails is reported, with the same message.
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
_A12 = np.arange(12)
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


def _header_fields(buf: Buffer, starts: np.ndarray, ends: np.ndarray,
                   tf: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stored payload lengths, masked length CRCs and unmasked data CRCs of framed records."""
    raw = np.frombuffer(buf, dtype=np.uint8)
    heads = raw[starts[:, None] + _A12[: 12 if tf else 8]]
    lengths = heads[:, :8].copy().view("<u8").ravel()
    if not tf:
        return lengths, np.zeros(0, np.uint32), np.zeros(0, np.uint32)
    len_crcs = heads[:, 8:12].copy().view("<u4").ravel()
    data_crcs = unmask_crcs(raw[(ends - 4)[:, None] + _A4].copy().view("<u4").ravel())
    return lengths, len_crcs, data_crcs


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
    if len(reads._shards) == 1:
        touched, which, local = [0], np.zeros(n, dtype=np.int64), idx
    else:
        shard_of = np.searchsorted(reads._cum, idx, side="right")
        found, which = np.unique(shard_of, return_inverse=True)
        touched, local = found.tolist(), idx - reads._first[shard_of]
        which = which.astype(np.int64, copy=False)
    fmt = reads.format
    tf = fmt is RecordFormat.TFRECORD
    starts = np.empty(n, dtype=np.int64)
    ends = np.empty(n, dtype=np.int64)
    lengths = np.empty(n, dtype=np.uint64)
    len_crcs = np.empty(n if tf else 0, dtype=np.uint32)
    data_crcs = np.empty(n if tf else 0, dtype=np.uint32)
    bufs: list[Buffer] = []
    for j, s in enumerate(touched):
        sel = np.flatnonzero(which == j) if len(touched) > 1 else slice(None)
        shard = reads._shards[s]
        st, en = shard.sidecar.spans(local[sel])  # corrupt offsets: SidecarError, as serially
        buf = reads._storage.mapped(shard.path, int(en.max()))
        if buf is None or int(st.min()) < 0:
            return None
        starts[sel], ends[sel] = st, en
        got = _header_fields(buf, st, en, tf)
        lengths[sel] = got[0]
        if tf:
            len_crcs[sel], data_crcs[sel] = got[1], got[2]
        bufs.append(buf)
    sizes = ends - starts - fmt.overhead
    outs = native.blank(sizes)
    src = starts + fmt.header_size
    check = tf and reads._verify
    bounds = np.searchsorted(np.cumsum(sizes), np.linspace(0, int(sizes.sum()),
                                                           pool._max_workers + 1)[1:-1])
    parts = list(zip([0, *bounds.tolist()], [*bounds.tolist(), n], strict=True))

    crcs = np.zeros(n, dtype=np.uint32)
    in_copy = check and native.hw_crc()  # the CRC of each copy, in the same compiled pass

    def work(part: tuple[int, int]) -> None:
        if in_copy or not check:
            native.fill(bufs, which, src, outs, part[0], part[1], crcs if in_copy else None)
            return
        crc = _crc32c.crc32c
        for k in range(*part):  # copy then check one record at a time: it is still in cache
            native.fill(bufs, which, src, outs, k, k + 1)
            crcs[k] = crc(outs[k])

    for _ in pool.map(work, [p for p in parts if p[0] < p[1]]):
        pass
    computed = crcs
    bad = lengths != sizes.astype(np.uint64)
    if check:
        memo = LENGTH_CRCS.get
        bad |= len_crcs != np.array([memo(m) or length_crc(m) for m in sizes.tolist()],
                                    dtype=np.uint32)
        bad |= data_crcs != computed
    if bad.any():
        k = int(np.argmax(bad))
        j = int(which[k])
        shard = reads._shards[touched[j]]
        reads._raise_problem(_accel.RECORD_FAILS_CHECK, shard, shard.sidecar, bufs[j],
                             int(local[k]))
    payloads: list[Any] = outs
    return payloads
