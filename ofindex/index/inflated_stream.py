"""The decompressed stream of a gzip/zlib file, inflated once, front to back, for the scanner.

:class:`InflatedStream` duck-types the :class:`~ofindex.storage.Storage` methods
:func:`~ofindex.index.scan.scan_file` reads through (``read_into``, ``read``), serving the
uncompressed bytes at the increasing offsets the scanner asks for; the scanner walks and
checks records in them exactly as in an uncompressed file. On the way it records seek points
every ``spacing`` uncompressed bytes (see :mod:`ofindex.formats.seekpoints`): member or
stream starts, and with the compiled inflater deflate block boundaries, whose 32 KiB windows
are kept zlib-compressed, cut to the part the data after the point uses
(:mod:`~ofindex.index.windows`). Each gzip member's CRC32 and length (zlib: Adler-32) are checked
by zlib as it passes (not those of a member entered at a seek point inside it).

Readers stream records the same way from a seek point (``start=``), with no points recorded.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from ..formats.compression import RAW_WBITS, TRAILER_BYTES, WBITS, starts_stream
from ..formats.seekpoints import FETCH_STEP, SeekKind, fetch_bounds, fetch_fields, make_table
from ..formats.sidecar_header import Compression
from ..storage import Storage
from ..storage.readahead import ReadAhead
from .inflate import (
    STATUS_DATA_ERROR,
    STATUS_END,
    STATUS_NEED_DICT,
    STATUS_OK,
    WINDOW,
    InflateFailure,
    can_prime,
    new_inflater,
)
from .windows import PendingWindow, WindowBlob, dense_spacing

#: Compressed bytes read per request from the source.
INPUT_CHUNK = 1 << 20
#: Uncompressed bytes inflated per step.
OUTPUT_STEP = 1 << 20
_LOOKAHEAD = 10  # bytes of a gzip header checked for a following member
_BOUND_BATCH = 256  # points whose fetch bounds are found at once


@dataclasses.dataclass(frozen=True)
class StartPoint:
    """Where a stream starts inflating: a seek point (kind, compressed offset ``in_``, primed
    ``bits``, its ``window``) and its offset ``out`` in the uncompressed stream."""

    kind: int
    in_: int
    bits: int
    window: bytes
    out: int


class InflatedStream:
    """The uncompressed bytes of one compressed file, forward only (see the module).

    Args:
        source: Storage of the compressed file (a :class:`ReadAhead` for remote files).
        path: The file.
        file_size: Its size.
        compression: Its compression.
        spacing: Uncompressed bytes between the seek points to record (0: none).
        progress: Called with the compressed bytes read, now and then.
        start: Where to start (default: the file's start); a primed start needs the compiled
            inflater.

    Attributes:
        compression: The file's compression.
        end: Size of the uncompressed stream once it ended cleanly, else ``None``.
    """

    is_local = False

    def __init__(self, source: Storage | ReadAhead, path: str, file_size: int,
                 compression: Compression, spacing: int,
                 progress: Callable[[int], None] | None = None,
                 start: StartPoint | None = None) -> None:
        self.source, self.path, self.file_size = source, path, file_size
        self.compression = compression
        self.spacing = max(0, int(spacing))
        self.progress = progress
        self.end: int | None = None
        self._failure: InflateFailure | None = None
        self._primes = can_prime() and self.spacing > 0
        if start is None:
            start = StartPoint(SeekKind.ZLIB_STREAM if compression is Compression.ZLIB
                               else SeekKind.GZIP_MEMBER, 0, 0, b"", 0)
        self._raw = start.kind in (SeekKind.PRIMED, SeekKind.ALIGNED)
        self._inf: Any = new_inflater(RAW_WBITS if self._raw else WBITS[compression],
                                      track=self._primes,
                                      every=FETCH_STEP if self._primes else 0)
        self._in = bytearray(INPUT_CHUNK + _LOOKAHEAD)
        self._lo = self._hi = 0      # unconsumed input is _in[_lo:_hi]
        self._in_base = start.in_    # file offset of _in[0]
        self._out = bytearray(2 * OUTPUT_STEP)
        self._out_base = start.out   # stream offset of _out[0]
        self._out_len = 0            # valid bytes in _out
        self._total_out = start.out
        self._member_out = start.out  # where the current member's output began
        self._marks: list[tuple[int, int]] = []  # (output reached, input consumed) per step
        # out, in, bits, kind, window_len, window_at, fetch
        self._points: list[list[int]] = []
        # where inflating was since point _bounded, for fetch bounds: (compressed and
        # uncompressed offset at the call, the Inflater's marks); lost: a call noted more
        # than the Inflater kept
        self._noted: list[tuple[int, int, bytes]] = []
        self._noted_lost = False
        self._bounded = 0  # points before this one have their fetch bound
        self._pending: PendingWindow | None = None
        self._gap = self.spacing  # to the next point: closer after a point that needs no window
        self._windows = WindowBlob()
        if start.kind == SeekKind.PRIMED:
            self._prime(start)
        if self.spacing:
            self._add_point(start.kind, start.out, start.in_, start.bits, start.window)

    def _prime(self, start: StartPoint) -> None:
        if start.bits:
            self._in_base -= 1  # the point's first bits are the top ones of the byte before
            if not self._ensure_input(1):
                self._fail("the compressed data ends early", truncated=True)
                return
            self._inf.prime(start.bits, self._in[0] >> (8 - start.bits))
            self._lo = 1
        self._inf.set_dictionary(start.window)

    # -- what the scanner calls -----------------------------------------------------------
    def url(self, path: str) -> str:
        return self.source.url(path)

    def read_into(self, path: str, start: int, buffer: memoryview) -> int:
        """Fill ``buffer`` with the stream from ``start`` on; short at the end of the stream
        or where inflating failed. Raises the failure once no byte is left before it."""
        self._fill(start, start + len(buffer))
        avail = self._out_base + self._out_len - start
        if avail <= 0:
            self.raise_failure()
            return 0
        n = min(len(buffer), avail)
        at = start - self._out_base
        buffer[:n] = memoryview(self._out)[at : at + n]
        return n

    def read(self, path: str, start: int, end: int) -> bytes:
        """The bytes ``[start, end)``, fewer at the end of the stream."""
        buf = bytearray(max(0, end - start))
        n = self.read_into(path, start, memoryview(buf))
        return bytes(buf[:n])

    def finish(self) -> None:
        """Inflate the rest of the file, discarding the output: checks the remaining
        members' trailers. Raises :class:`InflateFailure` for bad or missing data."""
        while self.end is None:
            self.raise_failure()
            self._out_base, self._out_len = self._total_out, 0
            self._step()

    def raise_failure(self) -> None:
        """Raise the pending :class:`InflateFailure`, if any."""
        if self._failure is not None:
            raise self._failure

    def compressed_offset_near(self, offset: int) -> int:
        """Where in the file the input was when uncompressed byte ``offset`` came out."""
        k = bisect.bisect_right(self._marks, (offset, 1 << 62))
        return self._marks[k - 1][1] if k else 0

    def seek_table(self) -> tuple[np.ndarray, bytes]:
        """The seek points recorded and the windows blob they point into."""
        self._settle(trim=self.end is not None)
        self._close_spans((self.end, self.file_size) if self.end is not None else None)
        blob = self._windows.finish()
        for k, length, at in self._windows.placed:
            self._points[k][4:6] = [length, at]
        cols = list(zip(*self._points, strict=True)) if self._points else [()] * 7
        out, in_, bits, kinds, wlen, wat, fetch = (list(c) for c in cols)
        return make_table(out, in_, bits, kinds, wlen, wat, fetch), blob

    # -- inflating --------------------------------------------------------------------------
    def _close_spans(self, ends: tuple[int, int] | None = None) -> None:
        """Give the points from :attr:`_bounded` to the one before the last their fetch
        bounds (all of them, when ``ends`` holds the ends of the streams), from the marks
        noted since."""
        first = self._bounded
        tail = [] if ends is None else [ends]
        points = [(p[0], p[1]) for p in self._points[first:]] + tail
        if len(points) < 2 or not self._primes:
            return
        outs, ins = (np.array(c, dtype=np.int64) for c in zip(*points, strict=True))
        noted = np.frombuffer(b"".join(raw for _, _, raw in self._noted),
                              dtype=np.int64).reshape(-1, 2)
        steps = [len(raw) // 16 for _, _, raw in self._noted]  # pairs per call
        noted = noted + np.repeat(np.array([(in0, out0) for in0, out0, _ in self._noted],
                                           dtype=np.int64).reshape(-1, 2), steps, axis=0)
        bounds = fetch_bounds(outs, ins, noted[:, 1], noted[:, 0])
        fields = [0] * len(bounds) if self._noted_lost else fetch_fields(bounds).tolist()
        for k, field in enumerate(fields, start=first):
            self._points[k][6] = field
        self._bounded = first + len(bounds)
        self._noted.clear()
        self._noted_lost = False

    def _add_point(self, kind: int, out: int, in_: int, bits: int, window: bytes) -> None:
        self._points.append([out, in_, bits, int(kind), 0, 0, 0])
        self._bound_now_and_then()
        self._windows.add(len(self._points) - 1, window)

    def _add_primed(self, out: int, bits: int, window: bytes) -> None:
        """A primed point whose window is cut once 32 KiB of output follow it (see
        :mod:`~ofindex.index.windows`)."""
        self._settle(trim=False)  # points closer than 32 KiB: the previous keeps its window
        self._points.append([out, self._in_offset(), bits, int(SeekKind.PRIMED), 0, 0, 0])
        self._bound_now_and_then()
        if bits and not self._lo:  # the byte before the point is gone: keep the window whole
            self._windows.add(len(self._points) - 1, window)
            return
        first = bytes(self._in[self._lo - 1 : self._lo]) if bits else b""
        self._pending = PendingWindow(len(self._points) - 1, out, bits, window, first)

    def _settle(self, *, trim: bool) -> None:
        pending, self._pending = self._pending, None
        if pending is None:
            return
        # a point with no window costs 32 bytes: where the data copies nothing from before a
        # point (incompressible records), points follow each other closely
        none = not pending.window or (trim and pending.copies_nothing())
        self._gap = dense_spacing(self.spacing) if none else self.spacing
        if trim and not none:  # the sparse window is found on the side, inflating goes on
            self._windows.add_sparse(pending.index, pending)
        elif not none:
            self._windows.add(pending.index, pending.window)

    def _drop_before(self, start: int) -> None:
        """Forget output before ``start`` (the scanner never goes back)."""
        k = start - self._out_base
        if k > 0 and k >= self._out_len // 2:
            k = min(k, self._out_len)
            # move what is kept to the front, keeping the buffer's size (deleting the front
            # shrank it, and growing it again cost a fresh zeroed step per MiB of output)
            view = memoryview(self._out)
            view[: self._out_len - k] = view[k : self._out_len]
            view.release()
            self._out_base += k
            self._out_len -= k

    def _fill(self, start: int, target: int) -> None:
        """Inflate until the output reaches ``target``, the stream ends, or it fails; output
        before ``start`` is dropped on the way (a reader starting far past a seek point holds
        no more than a step of it)."""
        self._drop_before(start)
        while (self._out_base + self._out_len < target and self.end is None
               and self._failure is None):
            self._step()
            self._drop_before(start)

    def _in_offset(self) -> int:
        return self._in_base + self._lo

    def _ensure_input(self, k: int) -> int:
        """Make at least ``k`` unconsumed input bytes available, or all that is left;
        returns how many are."""
        have = self._hi - self._lo
        nxt = self._in_base + self._hi
        if have >= k or nxt >= self.file_size:
            return have
        if self._lo:  # move what is left to the front
            self._in[:have] = self._in[self._lo : self._hi]
            self._in_base += self._lo
            self._lo, self._hi = 0, have
        room = memoryview(self._in)[self._hi : self._hi + min(INPUT_CHUNK,
                                                              self.file_size - nxt)]
        got = self.source.read_into(self.path, nxt, room)
        self._hi += got
        if self.progress is not None and got:
            self.progress(got)
        return self._hi - self._lo

    def _room(self) -> memoryview:
        if len(self._out) - self._out_len < OUTPUT_STEP:
            self._out.extend(bytes(OUTPUT_STEP))
        return memoryview(self._out)[self._out_len : self._out_len + OUTPUT_STEP]

    def _step(self) -> None:
        if not self._ensure_input(1):
            self._fail("the compressed data ends early", truncated=True)
            return
        due = self.spacing > 0 and self._total_out >= self._points[-1][0] + self._gap
        room = self._room()
        if self._primes and not due:  # stop where the next point falls due
            room = room[: self._points[-1][0] + self._gap - self._total_out]
        src = memoryview(self._in)[self._lo : self._hi]
        in0, out0 = self._in_offset(), self._total_out
        used, got, status, data_type = self._inf.inflate(src, room, self._primes and due)
        if self._primes:
            self._note_marks(in0, out0)
        if self._pending is not None:
            self._pending.feed(src[:used], room[:got])
        self._lo += used
        self._out_len += got
        self._total_out += got
        self._marks.append((self._total_out, self._in_offset()))
        if self._pending is not None and (status != STATUS_OK
                                          or self._pending.ready(self._total_out)):
            self._settle(trim=status in (STATUS_OK, STATUS_END))
        if status == STATUS_DATA_ERROR:
            self._fail(self._inf.message, truncated=False)
        elif status == STATUS_NEED_DICT:
            self._fail("a preset dictionary is needed", truncated=False)
        elif status == STATUS_END:
            self._next_member()
        elif due and self._primes and data_type & 0xC0 == 0x80:
            # a deflate block boundary (not after the last block): a seek point
            out = self._total_out
            self._add_primed(out, data_type & 7, self._inf.window(min(WINDOW,
                                                                      out - self._member_out)))
        elif not used and not got:  # zlib takes all the input it is given: never expected
            self._fail("inflating made no progress", truncated=False)

    def _note_marks(self, in0: int, out0: int) -> None:
        """Keep where the last inflate call was (see :meth:`_close_spans`)."""
        raw = self._inf.marks()
        if raw is None:
            self._noted_lost = True
        elif raw:
            self._noted.append((in0, out0, raw))

    def _bound_now_and_then(self) -> None:
        """After a point is added: the fetch bounds of the spans before it, a few hundred at
        a time (the marks they need are then dropped)."""
        if len(self._points) - self._bounded > _BOUND_BATCH:
            self._close_spans()

    def _next_member(self) -> None:
        """After the end of a member or stream: the file ends, or another one starts."""
        if self._raw:  # entered at a seek point inside it: its trailer goes unchecked
            trailer = TRAILER_BYTES[self.compression]
            if self._ensure_input(trailer) < trailer:
                self._fail("the file ends inside a trailer", truncated=True)
                return
            self._lo += trailer
            self._raw = False
        have = self._ensure_input(_LOOKAHEAD)
        if have == 0:
            self.end = self._total_out
            return
        head = bytes(self._in[self._lo : self._lo + min(have, _LOOKAHEAD)])
        if not starts_stream(head, self.compression):
            name = self.compression.name.lower()
            self._fail(f"{have} bytes after the end of the {name} stream are not another "
                       f"{name} stream", truncated=False)
            return
        self._inf.reset(WBITS[self.compression])
        self._member_out = self._total_out
        if self.spacing and self._total_out >= self._points[-1][0] + self.spacing:
            self._add_point(SeekKind.ZLIB_STREAM if self.compression is Compression.ZLIB
                            else SeekKind.GZIP_MEMBER, self._total_out, self._in_offset(),
                            0, b"")

    def _fail(self, why: str, *, truncated: bool) -> None:
        self._failure = InflateFailure(self._in_offset(), self._total_out, why, truncated)
