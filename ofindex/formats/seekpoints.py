"""Seek points of a compressed data file: where a decompressor can start in the middle.

A seek point pairs a position in the uncompressed stream with the compressed position where
inflating can resume, in the manner of zlib's ``examples/zran.c``. Some points need nothing
but a byte offset (the start of a gzip member or zlib stream, a byte-aligned point after a
full flush); the others are deflate block boundaries that begin inside a byte (``bits`` of
the byte before ``in`` belong to the next block) and need the 32 KiB of output before them
(the window), stored zlib-compressed in the sidecar's windows blob.

On disk each point is 32 bytes (:data:`SEEK_DTYPE`), in the order of ``out``; the first
point is the file's start. :class:`SeekTable` checks a sidecar's points once and answers
where a read starts.

A remote read fetches the compressed bytes from a point to an estimate of where the data it
wants ends: interpolated between the points around that end, plus a *fetch bound* (``fetch``)
the builder measured for those two points: how far past the interpolation inflating ever had
to read between them (its input noted every :data:`FETCH_STEP` bytes of output). Sidecars
written before the bound existed hold 0 there (the field was reserved), and so do points the
writer places; their reads add a wide margin instead.
"""

from __future__ import annotations

import enum
import itertools
import threading
import zlib
from collections import OrderedDict

import numpy as np

from ..errors import SidecarError

#: One seek point as stored in a sidecar (32 bytes, little-endian).
SEEK_DTYPE = np.dtype([
    ("out", "<u8"),         # offset in the uncompressed stream
    ("in", "<u8"),          # offset in the compressed file where inflating resumes
    ("bits", "u1"),         # bits of byte in-1 that belong to the next deflate block (0..7)
    ("kind", "u1"),         # a SeekKind
    ("fetch", "<u2"),       # 0, or 1 + the fetch bound in FETCH_UNIT bytes (see below)
    ("window_len", "<u4"),  # bytes of the compressed window in the blob (0: none needed)
    ("window_at", "<u8"),   # where the compressed window starts in the blob
])
assert SEEK_DTYPE.itemsize == 32


class SeekKind(enum.IntEnum):
    """How inflating starts at a seek point."""

    #: A deflate block boundary inside a member: prime ``bits``, set the window, inflate raw.
    PRIMED = 0
    #: The first byte of a gzip member (its header follows).
    GZIP_MEMBER = 1
    #: The first byte of a zlib stream (its 2-byte header follows).
    ZLIB_STREAM = 2
    #: A byte-aligned point that needs no window (after a full flush): inflate raw.
    ALIGNED = 3


def empty_table() -> np.ndarray:
    """A table of no seek points (a new one, for a table still to be filled)."""
    return np.zeros(0, dtype=SEEK_DTYPE)


#: The seek points of every sidecar of an uncompressed file: none (one shared read-only
#: table, not one made per sidecar).
NO_SEEK_POINTS = empty_table()
NO_SEEK_POINTS.flags.writeable = False


#: Unit of a stored fetch bound, in compressed bytes.
FETCH_UNIT = 64
#: Output bytes between the builder's notes of where inflating was (see the module docstring):
#: a bound exceeds the truth by at most the input of one step.
FETCH_STEP = 4096
#: Compressed bytes added to a fetch bound (an inflater may look a few bytes ahead).
FETCH_SLACK = 256


def fetch_field(bound: int | None) -> int:
    """The stored form of a fetch bound in bytes (``None``, or too large to store: 0)."""
    return 0 if bound is None else int(fetch_fields(np.array([bound]))[0])


def fetch_fields(bounds: np.ndarray) -> np.ndarray:
    """:func:`fetch_field` for many bounds (``int64``; none is ``None``)."""
    units = -(-np.maximum(0, np.asarray(bounds, dtype=np.int64)) // FETCH_UNIT) + 1
    found: np.ndarray = np.where(units <= 0xFFFF, units, 0)
    return found


def fetch_bounds(outs: np.ndarray, ins: np.ndarray, marks_out: np.ndarray,
                 marks_in: np.ndarray) -> np.ndarray:
    """The fetch bounds of consecutive points: for each, how far past the straight line to
    the next point the input of inflating went between them (the input noted after each
    step, against the line at the output the step started from: any byte of a step may need
    all of its input).

    Args:
        outs: Uncompressed offsets of the points, in order; the last one only ends the span
            before it (the next point, or the ends of the streams).
        ins: Their compressed offsets.
        marks_out: Uncompressed offsets where inflating was noted, after ``outs[0]`` and up
            to ``outs[-1]`` (others are ignored), in any order.
        marks_in: The compressed offsets noted there.

    Returns:
        ``int64`` bounds in bytes (at least 1), one per point but the last.
    """
    outs, ins = np.asarray(outs, dtype=np.int64), np.asarray(ins, dtype=np.int64)
    n = len(outs) - 1
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    mo, mi = np.asarray(marks_out, dtype=np.int64), np.asarray(marks_in, dtype=np.int64)
    inside = (mo > outs[0]) & (mo <= outs[-1])
    every_out = np.concatenate((mo[inside], outs))
    every_in = np.concatenate((mi[inside], ins))
    is_point = np.concatenate((np.zeros(int(inside.sum()), dtype=np.int64),
                               np.ones(n + 1, dtype=np.int64)))
    order = np.lexsort((is_point, every_out))  # by output; a mark before a point at its end
    every_out, every_in, is_point = every_out[order], every_in[order], is_point[order]
    span = np.cumsum(is_point)[:-1] - 1  # the span of each element but the last
    slope = np.maximum(0, np.diff(ins)) / np.maximum(1, np.diff(outs))
    line = ins[span] + (every_out[:-1] - outs[span]) * slope[span]
    worst = np.zeros(n, dtype=np.float64)
    np.maximum.at(worst, span, every_in[1:] - line)
    bounds: np.ndarray = np.ceil(worst).astype(np.int64) + 1
    return bounds


def make_table(out: list[int], in_: list[int], bits: list[int], kinds: list[int],
               window_len: list[int], window_at: list[int],
               fetch: list[int] | None = None) -> np.ndarray:
    """Build a seek table from columns (all of one length; ``fetch`` in the stored form of
    :func:`fetch_field`, default none)."""
    table = np.zeros(len(out), dtype=SEEK_DTYPE)
    table["out"], table["in"], table["bits"] = out, in_, bits
    table["kind"], table["window_len"], table["window_at"] = kinds, window_len, window_at
    if fetch is not None:
        table["fetch"] = fetch
    return table


def table_from_bytes(raw: bytes | memoryview, count: int) -> np.ndarray:
    """A read-only view of ``count`` seek points stored in ``raw``."""
    return np.frombuffer(raw, dtype=SEEK_DTYPE, count=count)


#: Uncompressed bytes between the seek points the builder records unless asked otherwise
#: (``seek_spacing=``): a random read inflates half of it on average, and each point stores a
#: sparse window (the bytes the data after it copies: ~5.7 KB for ~200 B text-like Examples,
#: nothing for incompressible data), so the whole index of such a file is ~4.5% of it at this
#: spacing with 2,000+ random reads/s (see ``tools/bench_compressed.py``).
DEFAULT_SPACING = 256 << 10
#: The same for :class:`ofindex.Writer`, whose points are full flushes that store nothing:
#: they cost compression instead (about 1.7% more bytes than TensorFlow's writer on ~200 B
#: Examples at 256 KiB, 0.5% at 1 MiB), so they can be 4x closer.
WRITER_SPACING = 256 << 10

#: Bytes of history a deflate stream can refer back to: the largest window.
WINDOW_BYTES = 32768


class WindowCache:
    """Inflated windows of every seek table of the process, least recently used first out,
    within a byte budget (a random read then pays for a window once per point, not per read).

    Args:
        budget: Bytes of windows kept (64 MiB: 2,048 full windows).
    """

    def __init__(self, budget: int = 64 << 20) -> None:
        self.budget = budget
        self._held = 0
        self._items: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[int, int]) -> bytes | None:
        """The window cached under ``key`` (a table's token and a point), or ``None``."""
        with self._lock:
            got = self._items.get(key)
            if got is not None:
                self._items.move_to_end(key)
            return got

    def put(self, key: tuple[int, int], window: bytes) -> None:
        """Keep ``window``, dropping the least recently used ones over the budget."""
        with self._lock:
            if key in self._items:
                return
            self._items[key] = window
            self._held += len(window)
            while self._held > self.budget and self._items:
                self._held -= len(self._items.popitem(last=False)[1])


#: The process's window cache.
WINDOWS = WindowCache()
_tokens = itertools.count()


class SeekTable:
    """The seek points of one sidecar, checked, with the lookups readers need.

    Args:
        table: The points (:data:`SEEK_DTYPE`).
        windows: The windows blob.
        file_size: The compressed file's size.
        uncompressed_size: The decompressed stream's size.
        path: The sidecar, for messages.

    Raises:
        SidecarError: The points are inconsistent (a corrupt sidecar).
    """

    def __init__(self, table: np.ndarray, windows: bytes | memoryview, file_size: int,
                 uncompressed_size: int, path: str) -> None:
        self.path = path
        self.out = table["out"].astype(np.int64)
        self.in_ = table["in"].astype(np.int64)
        self.bits = table["bits"].astype(np.int64)
        self.kind = table["kind"].astype(np.int64)
        self._wlen = table["window_len"].astype(np.int64)
        self._wat = table["window_at"].astype(np.int64)
        self._fetch = table["fetch"].astype(np.int64)
        self._windows = windows
        self.file_size = file_size
        self.uncompressed_size = uncompressed_size
        self._check(uncompressed_size)
        self._aligned = np.flatnonzero(self.kind != SeekKind.PRIMED)
        self._token = next(_tokens)

    def __len__(self) -> int:
        return len(self.out)

    def _check(self, usize: int) -> None:
        out, in_, bits, kind = self.out, self.in_, self.bits, self.kind
        primed = kind == SeekKind.PRIMED
        problems = [
            (not len(out), "no seek points"),
            (len(out) and (out[0] or in_[0] or kind[0] not in (SeekKind.GZIP_MEMBER,
                                                               SeekKind.ZLIB_STREAM)),
             "the first seek point is not the file's start"),
            (bool(np.any(np.diff(out) < 0) or np.any(np.diff(in_) < 0)), "points out of order"),
            (bool(np.any(in_ > self.file_size) or np.any(out > max(usize, 0))),
             "a point past the end of the data"),
            (bool(np.any(kind > SeekKind.ALIGNED) or np.any(bits > 7)
                  or np.any(bits[~primed] != 0) or np.any(primed & (bits > 0) & (in_ < 1))),
             "a bad point kind or bit position"),
            (bool(np.any(self._wlen[~primed] != 0) or np.any(self._wat < 0)
                  or np.any(self._wat + self._wlen > len(self._windows))),
             "a window outside the windows blob"),
        ]
        for bad, why in problems:
            if bad:
                raise SidecarError(f"{self.path}: the seek points are corrupt ({why}); rebuild "
                                   "the index with `ofindex build`")

    def point_before(self, offset: int) -> int:
        """The last point at or before uncompressed ``offset``."""
        return int(np.searchsorted(self.out, offset, side="right")) - 1

    def points_before(self, offsets: np.ndarray) -> np.ndarray:
        """:meth:`point_before` for many offsets."""
        found: np.ndarray = np.searchsorted(self.out, offsets, side="right") - 1
        return found

    def aligned_before(self, k: int) -> int:
        """The last point at or before point ``k`` that starts on a byte with no window."""
        return int(self._aligned[np.searchsorted(self._aligned, k, side="right") - 1])

    def compressed_end(self, out_end: int) -> int:
        """A compressed offset before which all the data up to uncompressed ``out_end`` lies:
        the first point at or after it, or the end of the file."""
        return int(self.compressed_ends(np.array([out_end]))[0])

    def compressed_ends(self, out_ends: np.ndarray) -> np.ndarray:
        """:meth:`compressed_end` for many offsets (``int64``)."""
        j = np.searchsorted(self.out, out_ends, side="left")
        inside = j < len(self.in_)
        found: np.ndarray = np.where(inside, self.in_[np.where(inside, j, 0)], self.file_size)
        return found

    def estimated_end(self, k: int, out_end: int) -> int:
        """A compressed offset by which inflating from point ``k`` has produced the data up
        to uncompressed ``out_end`` (past the file's start): interpolated between the points
        around it, plus their fetch bound (see the module docstring), never past
        :meth:`compressed_end` (remote reads fetch this much, and the rest only when it falls
        short). Without a bound: plus a quarter of the span and 16 KiB, or, between points
        whose data hardly compresses (stored deflate blocks: at least 99% as many bytes in as
        out; the interpolation is then off by 1% at most), 2% of the gap and 1 KiB."""
        return int(self.estimated_ends(np.array([k]), np.array([out_end]))[0])

    def estimated_ends(self, ks: np.ndarray, out_ends: np.ndarray) -> np.ndarray:
        """:meth:`estimated_end` for many points and offsets (``int64``)."""
        ends = np.asarray(out_ends, dtype=np.int64)
        j = np.searchsorted(self.out, ends, side="left")
        inside = j < len(self.out)
        at_hi = np.where(inside, j, 0)
        lo_out, lo_in = self.out[j - 1], self.in_[j - 1]
        hi_out = np.where(inside, self.out[at_hi], self.uncompressed_size)
        hi_in = np.where(inside, self.in_[at_hi], self.file_size)
        slope = np.maximum(0, hi_in - lo_in) / np.maximum(1, hi_out - lo_out)
        at = lo_in + np.floor((ends - lo_out) * slope).astype(np.int64)
        a = self.compressed_starts(ks)
        stored = 100 * (hi_in - lo_in) >= 99 * (hi_out - lo_out)
        margin = np.where(stored, (hi_out - lo_out) // 50 + 1024, (at - a) // 4 + (16 << 10))
        fetch = self._fetch[j - 1]
        margin = np.where(fetch > 0,
                          np.minimum(margin, (fetch - 1) * FETCH_UNIT + FETCH_SLACK), margin)
        found: np.ndarray = np.minimum(hi_in, at + margin)
        return found

    def compressed_start(self, k: int) -> int:
        """The first compressed byte inflating from point ``k`` needs."""
        return int(self.compressed_starts(np.array([k]))[0])

    def compressed_starts(self, ks: np.ndarray) -> np.ndarray:
        """:meth:`compressed_start` for many points (``int64``)."""
        found: np.ndarray = self.in_[ks] - (self.bits[ks] > 0)
        return found

    def window(self, k: int) -> bytes:
        """The (decompressed) window of point ``k``: empty unless it is a primed point.

        Raises:
            SidecarError: The stored window is corrupt.
        """
        n = int(self._wlen[k])
        if not n:
            return b""
        got = WINDOWS.get((self._token, k))
        if got is not None:
            return got
        a = int(self._wat[k])
        d = zlib.decompressobj()
        try:
            got = d.decompress(self._windows[a : a + n], WINDOW_BYTES + 1)
        except zlib.error:
            got = b""
        if not d.eof or not got or len(got) > min(WINDOW_BYTES, int(self.out[k])):
            raise SidecarError(f"{self.path}: the window of seek point {k} is corrupt; "
                               "rebuild the index with `ofindex build`")
        WINDOWS.put((self._token, k), got)
        return got
