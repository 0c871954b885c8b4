"""The CRC32C of every payload of an indexed file: the sidecar checksums of OFRecord files.

OFRecord has no CRC of its own; the sidecar carries one per payload (by default for every
OFRecord file, compressed or not; ``checksums=False`` opts out), which reads with
``verify=True`` check (:mod:`ofindex.read.sum_checks`). Where the scan holds every byte anyway
(a compressed file's inflated stream, a remote file's blocks) it computes them as it goes
(:func:`~ofindex.index.scan.span_crcs`); a local uncompressed file, whose scan reads only
headers, is memory-mapped afterwards and cut into blocks of whole records checksummed on threads
(:func:`payload_checksums`).
"""

from __future__ import annotations

import concurrent.futures as cf
import mmap
import os

import numpy as np

from ..errors import TruncatedRecordError
from ..formats.framing import RecordFormat
from ..storage.ranges import plan_blocks
from .scan import span_crcs


def payload_checksums(path: str, url: str, fmt: RecordFormat, offsets: np.ndarray,
                      indexed_end: int, *, threads: int = 2,
                      block_bytes: int = 32 << 20) -> np.ndarray:
    """CRC32C of the payload of each record at ``offsets`` of a local file (the last ends at
    ``indexed_end``), on ``threads`` threads over a memory map.

    Args:
        path: The local data file.
        url: The file as messages name it.
        fmt: Its framing.
        offsets: Where each record starts, as the scan found them.
        indexed_end: Where the last record ends.
        threads: Threads checksumming blocks.
        block_bytes: About how many bytes each block holds.

    Returns:
        ``uint32`` checksums, one per record.

    Raises:
        TruncatedRecordError: The file shrank since it was scanned.
    """
    if len(offsets) == 0:
        return np.empty(0, dtype=np.uint32)
    starts = offsets.astype(np.int64)
    ends = np.append(starts[1:], indexed_end)
    first, last = starts + fmt.header_size, ends - fmt.footer_size  # payload byte ranges
    blocks = plan_blocks(offsets, 0, len(offsets), block_bytes)
    fd = os.open(path, os.O_RDONLY)
    try:
        if os.fstat(fd).st_size < indexed_end:
            raise TruncatedRecordError(
                f"{url}: the file shrank while its checksums were computed; run `ofindex "
                f"build {url}` again once writing has finished", path=url, offset=indexed_end)
        mm = mmap.mmap(fd, indexed_end, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
    try:
        with cf.ThreadPoolExecutor(max(1, min(threads, len(blocks)))) as pool:
            parts = list(pool.map(lambda block: span_crcs(mm, first[block[0]:block[1]],
                                                          last[block[0]:block[1]]), blocks))
    finally:
        mm.close()
    return np.concatenate(parts)
