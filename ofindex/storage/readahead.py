"""A sequential read-ahead view of one remote file, for the index builder's scan.

The scanner asks for ~1 MiB blocks at increasing offsets (each starting where the last whole
record ended). Over a bucket, each ask would be one round trip. This view serves them from
large chunks (``chunk`` bytes, several MB) fetched in order with one chunk always in flight,
so a file is streamed once with big sequential requests while the previous chunk is scanned.
The bytes of the file's content regions (:func:`.stamp.content_regions`) are kept as they
stream past, so that its content digest costs no request of its own
(:meth:`ReadAhead.content_digest`).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib

from .base import Storage
from .stamp import FileStamp, content_digest, content_regions

#: Request size when a remote file is streamed (indexed, or read from its start): big enough
#: that a request's round trip is small next to its transfer.
STREAM_CHUNK = 8 << 20


class ReadAhead:
    """Duck-types the :class:`Storage` methods ``scan_file`` uses, for one file."""

    is_local = False

    def __init__(self, storage: Storage, path: str, size: int,
                 chunk: int = STREAM_CHUNK) -> None:
        self.storage = storage
        self.path = path
        self.size = size
        self.chunk = max(1 << 16, int(chunk))
        self._buf = bytearray()
        self._base = 0                 # file offset of _buf[0]
        self._next = 0                 # next offset to request
        self._pending: cf.Future[bytes] | None = None
        self._pend_start = 0
        self._pool = cf.ThreadPoolExecutor(1, thread_name_prefix="ofindex-readahead")
        self._regions = content_regions(size)
        self._parts = [bytearray(end - start) for start, end in self._regions]
        self._covered = [0] * len(self._regions)

    def content_digest(self) -> int | None:
        """The file's content digest from the bytes that streamed past, or ``None`` when a
        region was not read whole through this view (a scan that stopped early)."""
        if any(got != len(part) for got, part in zip(self._covered, self._parts, strict=True)):
            return None
        return content_digest(self.size, self._parts)

    def _keep_regions(self, start: int, data: bytes) -> None:
        """Copy what a chunk fetched at ``start`` holds of the content regions."""
        end = start + len(data)
        for k, (first, last) in enumerate(self._regions):
            lo, hi = max(start, first), min(end, last)
            if lo < hi:
                self._parts[k][lo - first : hi - first] = data[lo - start : hi - start]
                self._covered[k] += hi - lo

    # -- Storage surface used by the scanner --------------------------------------------------
    def url(self, path: str) -> str:
        return self.storage.url(path)

    def stamp(self, path: str) -> FileStamp:
        return self.storage.stamp(path)

    def read_into(self, path: str, start: int, buffer: memoryview) -> int:
        end = min(start + len(buffer), self.size)
        if end <= start:
            return 0
        self._ensure(start, end)
        n = end - start
        buffer[:n] = self._buf[start - self._base : start - self._base + n]
        return n

    def read_block(self, path: str, start: int, size: int) -> bytes:
        end = min(start + size, self.size)
        return self.read(path, start, end) if end > start else b""

    def read(self, path: str, start: int, end: int) -> bytes:
        if path != self.path or end - start > 2 * self.chunk:
            return self.storage.read(path, start, end)
        self._ensure(start, end)
        return bytes(self._buf[start - self._base : end - self._base])

    def close(self) -> None:
        self._drop_pending()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._buf = bytearray()

    def __enter__(self) -> ReadAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the window ---------------------------------------------------------------------------
    def _fetch(self, a: int, e: int) -> bytes:
        data = self.storage.read(self.path, a, e)
        self._keep_regions(a, data)  # (one fetch at a time: the pool has one thread)
        return data

    def _schedule(self) -> None:
        if self._pending is None and self._next < self.size:
            a = self._next
            e = min(a + self.chunk, self.size)
            self._pending = self._pool.submit(self._fetch, a, e)
            self._pend_start = a
            self._next = e

    def _drop_pending(self) -> None:
        if self._pending is not None:
            if not self._pending.cancel():
                with contextlib.suppress(Exception):
                    self._pending.result()
            self._pending = None

    def _ensure(self, start: int, end: int) -> None:
        """Make the buffer hold ``[start, end)`` (``end <= size``), dropping earlier bytes."""
        buf_end = self._base + len(self._buf)
        if not (self._base <= start <= buf_end):
            self._buf = bytearray()
            if self._pending is not None and self._pend_start <= start < self._next:
                self._base = self._pend_start  # the chunk in flight holds ``start``
            else:
                self._drop_pending()
                self._base = self._next = start
        while self._base + len(self._buf) < end:
            self._schedule()
            assert self._pending is not None
            data = self._pending.result()
            self._pending = None
            self._buf += data
        if start > self._base:
            del self._buf[: start - self._base]
            self._base = start
        self._schedule()  # keep one chunk in flight
