"""Sequential reading of one shard with large block reads and bulk header checks."""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Iterator

import numpy as np

from ..formats.framing import Buffer
from ..formats.sidecar import Sidecar
from ..storage import Storage, check_length
from ..storage.ranges import plan_blocks
from .checksums import check_many, record_namer, sidecar_sums
from .payloads import DIRECT_RECORD_BYTES, extract_payloads, read_record_direct


def stream_shard(
    storage: Storage, path: str, sidecar: Sidecar, lo: int, hi: int, verify: bool,
    block_bytes: int = 8 << 20,
) -> Iterator[bytes]:
    """Payloads of records ``lo..hi-1`` of one shard, in order."""
    for block in stream_blocks(storage, path, sidecar, lo, hi, verify, block_bytes):
        yield from block


def stream_blocks(
    storage: Storage, path: str, sidecar: Sidecar, lo: int, hi: int, verify: bool,
    block_bytes: int = 8 << 20,
) -> Iterator[list[bytes]]:
    """Payloads of records ``lo..hi-1`` of one shard, in order, a list per read block."""
    fmt = sidecar.format
    url = storage.url(path)
    sums = sidecar_sums(sidecar, verify)
    blocks = plan_blocks(sidecar.offsets, lo, hi, block_bytes)
    if not blocks:
        return

    def fetch(starts: np.ndarray, ends: np.ndarray) -> bytes:
        return storage.read(path, int(starts[0]), int(ends[-1]))

    if storage.is_local:
        # local: one reused buffer (fresh multi-MB allocations cost a page fault per 4 KiB)
        scratch = bytearray(0)

        def fetch_local(starts: np.ndarray, ends: np.ndarray) -> memoryview:
            nonlocal scratch
            s, e = int(starts[0]), int(ends[-1])
            if len(scratch) < e - s:  # headroom (blocks vary), never more than the file holds
                want = max(e - s, min(block_bytes, sidecar.indexed_end - s))
                scratch = bytearray(want * 5 // 4)
            view = memoryview(scratch)[: e - s]
            got = storage.read_into(path, s, view)
            if got != e - s:
                check_length(url, s, e, got)
            return view

    mapped = storage.mapped(path, sidecar.header.indexed_end) if storage.can_mmap else None
    pool = None if storage.is_local else cf.ThreadPoolExecutor(1)
    try:
        spans = _block_spans(sidecar, *blocks[0])
        pending = pool.submit(fetch, *spans) if pool is not None else None
        buf: Buffer
        for k, (a, b) in enumerate(blocks):
            starts, ends = spans
            if k + 1 < len(blocks):
                spans = _block_spans(sidecar, *blocks[k + 1])
            if pool is not None and pending is not None:
                buf, base = pending.result(), int(starts[0])
                if k + 1 < len(blocks):
                    pending = pool.submit(fetch, *spans)
            elif mapped is not None:  # payloads are cut straight out of the map
                buf, base = mapped, 0
            elif (ends[-1] - starts[0]) // (b - a) >= DIRECT_RECORD_BYTES or (
                    ends[-1] - starts[0] > 2 * block_bytes):
                # large records (or a huge last one): each payload read straight into its own
                # bytes, no staging buffer sized from the index
                block = [read_record_direct(storage, path, s, e, fmt, verify, a + j)
                         for j, (s, e) in enumerate(zip(starts.tolist(), ends.tolist(),
                                                        strict=True))]
                if sums is not None:
                    check_many(block, sums[a:b], record_namer(url, starts, a))
                yield block
                continue
            else:
                buf, base = fetch_local(starts, ends), int(starts[0])
            payloads = extract_payloads(buf, starts - base, ends - base, fmt, verify,
                                        url, starts, np.arange(a, b))
            if sums is not None:
                check_many(payloads, sums[a:b], record_namer(url, starts, a))
            yield payloads
    finally:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def _block_spans(sidecar: Sidecar, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """File byte ranges ``[start, end)`` of records ``a..b-1`` (checked by the sidecar)."""
    return sidecar.spans(np.arange(a, b, dtype=np.int64))
