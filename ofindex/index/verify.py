"""Checking the payload CRC of every TFRecord record whose offsets are known, on threads.

The records are cut into blocks of whole records that worker threads check independently;
CRC32C releases the GIL, so the cores checksum at once. The (local) file is memory-mapped for
this (a copy costs more than the CRC itself); each block first re-checks the file size, so a
file truncated while it is being verified gives an error rather than touching unmapped pages.
Remote files are checked in the scanner's single pass instead. The first bad record wins.
"""

from __future__ import annotations

import concurrent.futures as cf
import mmap
import os

import numpy as np

from ..errors import CorruptRecordError, TruncatedRecordError
from ..formats.framing import RecordFormat
from ..storage import Storage
from ..storage.ranges import plan_blocks
from .checks import data_crc_problem, first_bad_data_crc

_HS = RecordFormat.TFRECORD.header_size
_OV = RecordFormat.TFRECORD.overhead


def verify_crcs(storage: Storage, path: str, offsets: np.ndarray, indexed_end: int, *,
                threads: int = 2, block_bytes: int = 32 << 20) -> None:
    """Check every payload CRC of the TFRecord records at ``offsets`` (the last ends at
    ``indexed_end``) of the local file ``path``; raise :class:`CorruptRecordError` for the
    first bad one."""
    if len(offsets) == 0:
        return
    blocks = plan_blocks(offsets, 0, len(offsets), block_bytes)
    checker = _BlockChecker(storage.url(path), path, offsets, indexed_end)
    pool = cf.ThreadPoolExecutor(max(1, min(threads, len(blocks))))
    try:
        for problem in pool.map(checker.check, blocks):  # in order: the first bad one wins
            if problem is not None:
                raise problem
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        checker.close()


class _BlockChecker:
    """Checks blocks of records of one memory-mapped local file (shared by the threads)."""

    def __init__(self, url: str, path: str, offsets: np.ndarray, end: int) -> None:
        self.url, self.offsets, self.end = url, offsets, end
        self.fd = os.open(path, os.O_RDONLY)
        if os.fstat(self.fd).st_size < end:
            os.close(self.fd)
            raise self._shrank(end, 0)
        self.mm = mmap.mmap(self.fd, end, access=mmap.ACCESS_READ) if end else None
        if self.mm is not None and hasattr(self.mm, "madvise"):
            self.mm.madvise(mmap.MADV_SEQUENTIAL)

    def _shrank(self, end: int, record: int) -> TruncatedRecordError:
        return TruncatedRecordError(
            f"{self.url}: the file shrank while it was being verified; run "
            f"`ofindex build --verify {self.url}` again once writing has finished",
            path=self.url, offset=end, record=record,
        )

    def close(self) -> None:
        os.close(self.fd)
        self.mm = None  # the map itself goes with the last view of it

    def check(self, block: tuple[int, int]) -> CorruptRecordError | None:
        a, b = block
        at = self.offsets[a:b].astype(np.int64)
        end = int(self.offsets[b]) if b < len(self.offsets) else self.end
        if os.fstat(self.fd).st_size < end:
            raise self._shrank(end, a)
        lengths = np.append(at[1:], end) - at - _OV
        assert self.mm is not None  # blocks exist only when there are records: end > 0
        bad = first_bad_data_crc(self.mm, at, lengths, _HS)
        if bad is None:
            return None
        return data_crc_problem(self.mm, int(at[bad]), int(lengths[bad]), _HS, url=self.url,
                                base=0, record=a + bad)
