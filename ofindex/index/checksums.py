"""The CRC32C of every payload of an indexed file, for sidecars built with ``checksums=True``.

OFRecord has no CRC of its own; the sidecar can carry one per payload, which reads with
``verify=True`` check (:mod:`ofindex.read.checksums`). The builder computes them in a pass
over the records its scan found: a local file is memory-mapped and cut into blocks of whole
records checksummed on threads (CRC32C releases the GIL); a remote file is streamed once more
in blocks (through the scanner's read-ahead).
"""

from __future__ import annotations

import concurrent.futures as cf
import mmap
import os

import crc32c as _crc32c
import numpy as np

from ..errors import TruncatedRecordError
from ..formats.framing import Buffer, RecordFormat
from ..storage import Storage
from ..storage.ranges import plan_blocks
from ..storage.readahead import ReadAhead


def payload_checksums(storage: Storage | ReadAhead, path: str, fmt: RecordFormat,
                      offsets: np.ndarray, indexed_end: int, *, threads: int = 2,
                      block_bytes: int = 32 << 20) -> np.ndarray:
    """CRC32C of the payload of each record at ``offsets`` (the last ends at ``indexed_end``).

    Args:
        storage: Where the file is (a local storage is memory-mapped).
        path: The data file.
        fmt: Its framing.
        offsets: Where each record starts, as the scan found them.
        indexed_end: Where the last record ends.
        threads: Threads checksumming blocks of a local file.
        block_bytes: About how many bytes each block holds.

    Returns:
        ``uint32`` checksums, one per record.

    Raises:
        TruncatedRecordError: The file shrank since it was scanned.
    """
    out = np.empty(len(offsets), dtype=np.uint32)
    if len(offsets) == 0:
        return out
    starts = offsets.astype(np.int64)
    ends = np.append(starts[1:], indexed_end)
    first, last = starts + fmt.header_size, ends - fmt.footer_size  # payload byte ranges
    local = isinstance(storage, Storage) and storage.cheap_seeks
    # remote: blocks the size of the read-ahead's requests, so that they stream
    blocks = plan_blocks(offsets, 0, len(offsets), block_bytes if local else 8 << 20)
    url = storage.url(path)

    def fill(buf: Buffer, a: int, b: int, base: int) -> None:
        view, crc = memoryview(buf), _crc32c.crc32c
        for k, (p, q) in enumerate(zip((first[a:b] - base).tolist(),
                                       (last[a:b] - base).tolist(), strict=True)):
            out[a + k] = crc(view[p:q])

    if local:
        fd = os.open(path, os.O_RDONLY)
        try:
            if os.fstat(fd).st_size < indexed_end:
                raise _shrank(url, indexed_end)
            mm = mmap.mmap(fd, indexed_end, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        with cf.ThreadPoolExecutor(max(1, min(threads, len(blocks)))) as pool:
            list(pool.map(lambda block: fill(mm, block[0], block[1], 0), blocks))
        return out
    for a, b in blocks:
        s, e = int(starts[a]), int(ends[b - 1])
        data = storage.read(path, s, e)
        if len(data) != e - s:
            raise _shrank(url, e)
        fill(data, a, b, s)
    return out


def _shrank(url: str, end: int) -> TruncatedRecordError:
    return TruncatedRecordError(
        f"{url}: the file shrank while its checksums were computed; run `ofindex build "
        f"--checksums {url}` again once writing has finished", path=url, offset=end,
    )
