"""Sequential reading of one shard with large block reads and bulk header checks."""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Iterator
from types import ModuleType

import numpy as np

from ...cache.data import DataCache
from ...formats.framing import Buffer
from ...formats.sidecar import Sidecar
from ...storage import Storage, check_length
from ...storage.ranges import plan_blocks
from ..payloads import DIRECT_RECORD_BYTES, extract_payloads, read_record_direct
from ..sum_checks import check_many, record_namer, sidecar_sums


def stream_blocks(
    storage: Storage, path: str, sidecar: Sidecar, lo: int, hi: int, verify: bool,
    block_bytes: int = 8 << 20, data_cache: DataCache | None = None, *,
    native: ModuleType | None,
) -> Iterator[list[bytes]]:
    """Payloads of records ``lo..hi-1`` of one shard, in order, a list per read block.

    Each block of records is read one of four ways: remotely, with the next block's request
    in flight while this one is cut (through ``data_cache`` when given: from the blocks of
    the file kept on local disk, each checked against its CRC when first mapped); from the
    memory map (a storage that maps files, read by the compiled module ``native``); record
    by record, each payload straight into its own ``bytes`` (local records of 64 KiB or
    more, or a block far larger than ``block_bytes``); or into one reused buffer (fresh
    multi-MB buffers cost a page fault per 4 KiB). ``native`` is the compiled module the
    caller's access reads with, or ``None`` (the pure-Python loops).
    """
    blocks = plan_blocks(sidecar.offsets, lo, hi, block_bytes)
    if not blocks:
        return
    fmt, url = sidecar.format, storage.url(path)
    sums = sidecar_sums(sidecar, verify)
    if storage.is_local:
        source = _local_blocks(storage, path, sidecar, blocks, block_bytes, native)
    else:
        source = _prefetched_blocks(storage, path, sidecar, blocks, data_cache)
    for (a, b), (starts, ends, buf, base) in zip(blocks, source, strict=True):
        if buf is None:  # records read one by one, no staging buffer sized from the index
            block = [read_record_direct(storage, path, s, e, fmt, verify, a + j)
                     for j, (s, e) in enumerate(zip(starts.tolist(), ends.tolist(),
                                                    strict=True))]
        else:
            block = extract_payloads(buf, starts - base, ends - base, fmt, verify, url, starts,
                                     np.arange(a, b), native)
        if sums is not None:
            check_many(block, sums[a:b], record_namer(url, starts, a))
        yield block


#: A block read: its records' spans, and the buffer holding them with the file offset of
#: its first byte (``None``: read the records one by one).
_Block = tuple[np.ndarray, np.ndarray, Buffer | None, int]


def _prefetched_blocks(storage: Storage, path: str, sidecar: Sidecar,
                       blocks: list[tuple[int, int]],
                       data_cache: DataCache | None) -> Iterator[_Block]:
    """Remote blocks, each a range request (or read through the data cache), the next one
    in flight on a thread."""
    pool = cf.ThreadPoolExecutor(1)

    def fetch(starts: np.ndarray, ends: np.ndarray) -> Buffer:
        start, end = int(starts[0]), int(ends[-1])
        if data_cache is not None:
            return data_cache.read(storage, [path], [0], [start], [end]).buffer()
        return storage.read(path, start, end)

    try:
        spans = _block_spans(sidecar, *blocks[0])
        pending = pool.submit(fetch, *spans)
        for k in range(len(blocks)):
            starts, ends = spans
            buf = pending.result()
            if k + 1 < len(blocks):
                spans = _block_spans(sidecar, *blocks[k + 1])
                pending = pool.submit(fetch, *spans)
            yield starts, ends, buf, int(starts[0])
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _local_blocks(storage: Storage, path: str, sidecar: Sidecar, blocks: list[tuple[int, int]],
                  block_bytes: int, native: ModuleType | None) -> Iterator[_Block]:
    """Local blocks: the memory map when there is one (cut by the compiled module, which
    alone reads maps), else large records one by one, else one reused buffer."""
    mapped = (storage.mapped(path, sidecar.header.indexed_end)
              if storage.can_mmap and native is not None else None)
    scratch = bytearray(0)
    for a, b in blocks:
        starts, ends = _block_spans(sidecar, a, b)
        size = int(ends[-1] - starts[0])
        if mapped is not None:  # payloads are cut straight out of the map
            yield starts, ends, mapped, 0
        elif size // (b - a) >= DIRECT_RECORD_BYTES or size > 2 * block_bytes:
            yield starts, ends, None, 0
        else:
            first = int(starts[0])
            if len(scratch) < size:  # headroom (blocks vary), never more than the file holds
                scratch = bytearray(max(size, min(block_bytes, sidecar.indexed_end - first))
                                    * 5 // 4)
            view = memoryview(scratch)[:size]
            got = storage.read_into(path, first, view)
            if got != size:
                check_length(storage.url(path), first, first + size, got)
            yield starts, ends, view, first


def _block_spans(sidecar: Sidecar, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """File byte ranges ``[start, end)`` of records ``a..b-1`` (checked by the sidecar)."""
    return sidecar.spans(np.arange(a, b, dtype=np.int64))
