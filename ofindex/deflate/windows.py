"""Sparse windows for primed seek points: keep only the history the data after a point uses.

A primed seek point needs the 32 KiB of output before it, because deflate may copy from that
far back. Usually only a few of those bytes are ever copied: once 32 KiB of output follow a
point, no later copy can reach behind it, so the bytes the next 32 KiB copy from the window
are all a reader needs; the others can be stored as zeros, which compress to almost nothing.

Which window bytes are copied is found with zlib alone (no inflate code of our own; ISA-L
when it is installed, see :mod:`.fast_inflate`), by inflating the 32 KiB after the point
three more times with *marker* windows in place of the real one: byte ``p`` of the window
set to ``p & 0xFF``, to ``~p & 0xFF`` and to ``p >> 8``. The deflate stream's structure does
not depend on the bytes it produces, so an output byte that differs between the first two
runs was copied (directly or through earlier output) from the window, from position
``hi * 256 + lo`` read off the third and first runs; a byte that
does not differ is a literal. The sparse window (the real bytes at the copied positions,
zeros elsewhere, cut before the first copied one) is then checked: inflating with it must
give exactly the output the builder got, or the real window is kept. :class:`PendingWindow`
keeps the compressed bytes and the output that follow a point until then.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import zlib
from typing import Any

import numpy as np

from .._threads import ProcessPool
from ..formats.compression import RAW_WBITS
from .fast_inflate import ISAL, fast_raw
from .inflate import STATUS_DATA_ERROR, WINDOW, new_inflater

#: The marker windows (see the module docstring) for a 32 KiB window; a shorter window of
#: ``n`` bytes uses their first ``n``.
_POSITIONS = np.arange(WINDOW)
_MARKERS = tuple(bytes(m.astype(np.uint8)) for m in (_POSITIONS & 0xFF, ~_POSITIONS & 0xFF,
                                                     _POSITIONS >> 8))
#: zlib level of the stored windows when ISA-L is not installed (zlib's default).
WINDOW_LEVEL = 6


#: The closest that points needing no window follow each other. At least 32 KiB, the output it
#: takes to know that the next point needs no window either; 64 KiB measured on 10 k x 100 KB
#: JPEG-like records: the build 21% faster (each point costs a few copies and an inflate of
#: 32 KiB), the index half the size, random reads 3% slower (tools/bench_compressed.py).
DENSE_FLOOR = 2 * WINDOW


def dense_spacing(spacing: int) -> int:
    """Uncompressed bytes to the next seek point after one that needs no window (the data
    after it copies nothing from before it, as with incompressible records in stored deflate
    blocks): an eighth of ``spacing``, but at least :data:`DENSE_FLOOR` (such points cost 32
    bytes each)."""
    return max(DENSE_FLOOR, spacing // 8)


def compress_window(window: bytes) -> bytes:
    """A window as stored in the sidecar: zlib format, by ISA-L's level 1 when it is installed
    (8x faster than zlib's level 6 on sparse windows, 5% larger), else by zlib."""
    if ISAL is not None:
        return bytes(ISAL.compress(window, 1))
    return zlib.compress(window, WINDOW_LEVEL)


class PendingWindow:
    """A primed point's window, waiting for the 32 KiB of output that follow the point.

    Args:
        index: The point's number in the seek table.
        out: Its uncompressed offset.
        bits: Its primed bits.
        window: The full window.
        first: The byte before the point's compressed offset when ``bits`` (else empty).
    """

    def __init__(self, index: int, out: int, bits: int, window: bytes, first: bytes) -> None:
        self.index, self.out, self.bits, self.window = index, out, bits, window
        self.captured = bytearray(first)
        self.produced = bytearray()

    def feed(self, consumed: memoryview | bytes, produced: memoryview | bytes) -> None:
        """Compressed bytes inflated after the point, and the output they gave."""
        self.captured += consumed
        if len(self.produced) < WINDOW:
            self.produced += produced[: WINDOW - len(self.produced)]

    def ready(self, total_out: int) -> bool:
        """Whether enough output followed the point to find the bytes it copies."""
        return total_out - self.out >= WINDOW

    def shortest(self) -> bytes:
        """The sparse window (see the module docstring), or the whole window when the
        sparse one does not reproduce the output exactly (call once :meth:`ready`, or at the
        end of the stream): :meth:`copies_nothing`, else :meth:`sparse`."""
        return b"" if self.copies_nothing() else self.sparse()

    def copies_nothing(self) -> bool:
        """Whether the point needs no window: there is none, or the output after it comes
        out the same without one (one inflate)."""
        if not self.window:
            return True
        real = bytes(self.produced)
        if not real:
            return False
        alone = self._inflate(b"")
        return alone is not None and len(alone) == len(real) and alone == real

    def sparse(self) -> bytes:
        """The sparse window by the marker windows (four inflates), or the whole window when
        it does not reproduce the output exactly. Touches nothing :meth:`feed` changes, so it
        may run on another thread once the point's output is all in."""
        window = self.window
        real = bytes(self.produced)
        if not window or not real:
            return window
        n = len(window)
        lo, flip, hi = (self._inflate(m[:n]) for m in _MARKERS)
        if lo is None or flip is None or hi is None or not len(lo) == len(flip) == len(hi) \
                or len(lo) > len(real):
            return window
        a = np.frombuffer(lo, dtype=np.uint8)
        copied = a != np.frombuffer(flip, dtype=np.uint8)
        where = np.frombuffer(hi, dtype=np.uint8)[copied].astype(np.int64) * 256 + a[copied]
        if not len(where):
            sparse = b""
        else:
            if int(where.max()) >= len(window):
                return window
            keep = np.zeros(len(window), dtype=bool)
            keep[where] = True
            first = int(where.min())
            sparse = np.where(keep, np.frombuffer(window, dtype=np.uint8), 0)[first:].tobytes()
        check = self._inflate(sparse)
        return sparse if check is not None and check == real[: len(check)] \
            and len(check) == len(lo) else window

    def _inflate(self, window: bytes) -> bytes | None:
        """The output (up to 32 KiB) of inflating the captured data with ``window``, or
        ``None`` when zlib refuses it (a copy from before the window)."""
        fast = fast_raw(self.captured, self.bits, window, WINDOW)
        if fast is not None:
            return fast
        inf: Any = new_inflater(RAW_WBITS)
        data = memoryview(self.captured)
        if self.bits:
            inf.prime(self.bits, data[0] >> (8 - self.bits))
            data = data[1:]
        if window:
            inf.set_dictionary(window)
        out = bytearray(WINDOW)
        _, produced, status, _ = inf.inflate(data, out)
        if status == STATUS_DATA_ERROR:
            return None
        return bytes(out[:produced])


#: Threads that find sparse windows while builders go on inflating (the marker inflates of
#: one file take about a third of the time its own inflating does; several files may be
#: built at once).
_POOL = ProcessPool("ofindex-windows")
#: Sparse windows being found at once, at most (each holds about 100 KB until it is done).
MAX_QUEUED = 16


class WindowBlob:
    """The compressed windows of one file's seek points, in the order of the points, as the
    sidecar's windows blob; sparse windows are found on a background thread (where the
    process may use two cores), each as soon as its point's output is in.
    """

    def __init__(self) -> None:
        self._pool = _POOL.get()
        self._queue: collections.deque[tuple[int, cf.Future[bytes] | bytes]] = \
            collections.deque()
        self._parts: list[bytes] = []
        self._size = 0
        #: ``(point, stored length, offset in the blob)`` of each window stored so far.
        self.placed: list[tuple[int, int, int]] = []

    def add(self, k: int, window: bytes) -> None:
        """Store ``window`` as it is for point ``k`` (no window: nothing is stored)."""
        if window:
            self._put(k, compress_window(window))

    def add_sparse(self, k: int, pending: PendingWindow) -> None:
        """Store the sparse window of point ``k`` (:meth:`PendingWindow.sparse`)."""
        if self._pool is None:
            self.add(k, pending.sparse())
            return
        self._put(k, self._pool.submit(_sparse_packed, pending))

    def finish(self) -> bytes:
        """Wait for the windows still being found; returns the blob (:attr:`placed` then
        holds every window)."""
        self._drain(everything=True)
        return b"".join(self._parts)

    def _put(self, k: int, item: cf.Future[bytes] | bytes) -> None:
        self._queue.append((k, item))
        self._drain(everything=False)

    def _drain(self, *, everything: bool) -> None:
        """Append the windows that are ready, in point order (all of them with
        ``everything``, or while too many wait)."""
        queue = self._queue
        while queue:
            k, item = queue[0]
            if isinstance(item, cf.Future):
                if not (everything or len(queue) > MAX_QUEUED or item.done()):
                    return
                packed = item.result()
            else:
                packed = item
            queue.popleft()
            if packed:
                self.placed.append((k, len(packed), self._size))
                self._parts.append(packed)
                self._size += len(packed)


def _sparse_packed(pending: PendingWindow) -> bytes:
    """The point's sparse window, compressed (empty when it needs none)."""
    window = pending.sparse()
    return compress_window(window) if window else b""

