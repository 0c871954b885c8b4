"""Sequential reading of one shard with large block reads and bulk header checks."""

from __future__ import annotations

import concurrent.futures as cf
from typing import Iterator

import numpy as np

from .framing import RecordFormat
from .payloads import DIRECT_RECORD_BYTES, extract_payloads, read_record_direct
from .sidecar import Sidecar
from .storage import Storage
from .storage.base import check_length


def plan_blocks(offsets: np.ndarray, lo: int, hi: int, block_bytes: int) -> list[tuple[int, int]]:
    """Split records ``lo..hi-1`` into runs ``[a, b)`` whose records start within
    ``block_bytes`` of the run's first record (so a read is about that size; at least one
    record each)."""
    blocks = []
    a = lo
    while a < hi:
        target = int(offsets[a]) + block_bytes
        b = a + 1 + int(np.searchsorted(offsets[a + 1 : hi], target, side="right"))
        blocks.append((a, b))
        a = b
    return blocks


def stream_shard(
    storage: Storage, path: str, sidecar: Sidecar, lo: int, hi: int, verify: bool,
    block_bytes: int = 8 << 20,
) -> Iterator[bytes]:
    """Payloads of records ``lo..hi-1`` of one shard, in order."""
    offsets = sidecar.offsets
    end = sidecar.header.indexed_end
    fmt = sidecar.format
    blocks = plan_blocks(offsets, lo, hi, block_bytes)

    def span(a: int, b: int) -> tuple[int, int]:
        return int(offsets[a]), (int(offsets[b]) if b < sidecar.header.count else end)

    def fetch(a: int, b: int) -> bytes:
        s, e = span(a, b)
        return storage.read(path, s, e)

    if storage.cheap_seeks:
        # local: one reused buffer (fresh multi-MB allocations cost a page fault per 4 KiB)
        scratch = bytearray(0)

        def fetch_local(a: int, b: int) -> memoryview:
            nonlocal scratch
            s, e = span(a, b)
            if len(scratch) < e - s:
                scratch = bytearray(max(e - s, block_bytes) * 5 // 4)  # headroom: blocks vary
            view = memoryview(scratch)[: e - s]
            got = storage.read_into(path, s, view)
            if got != e - s:
                check_length(storage.url(path), s, e, got)
            return view

    mapped = storage.mapped(path, end) if (storage.maps_files and blocks) else None
    pool = None if storage.cheap_seeks else cf.ThreadPoolExecutor(1)
    try:
        pending = pool.submit(fetch, *blocks[0]) if (pool and blocks) else None
        for k, (a, b) in enumerate(blocks):
            if pool is not None:
                buf, base = pending.result(), int(offsets[a])
                if k + 1 < len(blocks):
                    pending = pool.submit(fetch, *blocks[k + 1])
            elif mapped is not None:  # payloads are cut straight out of the map
                buf, base = mapped, 0
            else:
                s0, e0 = span(a, b)
                if (e0 - s0) // (b - a) >= DIRECT_RECORD_BYTES:  # large records: no staging
                    yield from _large_records(storage, path, offsets, a, b, end,
                                              sidecar.header.count, fmt, verify)
                    continue
                buf, base = fetch_local(a, b), int(offsets[a])
            yield from _records_in_block(buf, offsets, a, b, base, end, sidecar.header.count,
                                         fmt, verify, storage.url(path))
    finally:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def _large_records(
    storage: Storage, path: str, offsets: np.ndarray, a: int, b: int, end: int, count: int,
    fmt: RecordFormat, verify: bool,
) -> Iterator[bytes]:
    """Records ``a..b-1`` read one by one (large records: no staging copy)."""
    starts = offsets[a : b + 1].tolist() if b < count else offsets[a:b].tolist() + [end]
    for k in range(b - a):
        yield read_record_direct(storage, path, starts[k], starts[k + 1], fmt, verify, a + k)


def _records_in_block(
    buf: bytes, offsets: np.ndarray, a: int, b: int, base: int, end: int, count: int,
    fmt: RecordFormat, verify: bool, url: str,
) -> list[bytes]:
    starts = offsets[a:b].astype(np.int64) - base
    ends = np.empty_like(starts)
    ends[:-1] = starts[1:]
    ends[-1] = (int(offsets[b]) if b < count else end) - base
    return extract_payloads(buf, starts, ends, fmt, verify, lambda k: url, starts + base,
                            np.arange(a, b))
