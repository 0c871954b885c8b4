"""Scanning one data file for record offsets: the heart of the index builder.

Headers are walked in a tight loop over large blocks, then checked in bulk with numpy (length
CRCs through lookup tables, impossible lengths, records running past the end of the file).
With large records on cheap-seek storage only the headers are read. With ``verify=True``
every payload's CRC is checked too: locally in a second, multi-threaded pass over the records
found (:mod:`ofindex.index.verify`), remotely in the same pass (data crosses the network once).
A compressed file is scanned the same way through its decompressed stream
(:class:`~ofindex.deflate.stream.InflatedStream`), whose size is learnt at its end: only
records wholly inside a block are taken, and the next block starts at the first one that is not.

The index layer's loops over records (walking headers, CRCs of spans) run on the compiled
module, without the GIL; this module holds that choice: without the module (not built) the
pure-Python loops run, the same results (and the compiled loops' test oracle).
"""

from __future__ import annotations

import dataclasses
import struct
import sys
import warnings
from collections.abc import Callable
from typing import Protocol

import crc32c as _crc32c
import numpy as np

from .. import _accel
from ..deflate.inflate import InflateFailure, in_stream_error
from ..deflate.stream import InflatedStream
from ..errors import CorruptRecordError, TruncatedRecordError
from ..formats.framing import Buffer, RecordFormat, parse_header
from ..storage import Storage
from ..storage.readahead import ReadAhead
from .checks import check_headers, data_crc_problem, first_bad_data_crc, verify_streaming
from .verify import verify_crcs

_LEN = struct.Struct("<Q").unpack_from
_SEEK_THRESHOLD = 32 << 10   # records this large on average: read headers only
_HEADER_READ = 4096
#: The size of a decompressed stream until its end is reached (no stream is that long).
UNKNOWN_SIZE = 1 << 62
#: What the scan hands the payloads of the records it accepts to (``scan_file(on_records=)``).
RecordsHook = Callable[[bytearray | bytes, np.ndarray, np.ndarray], None]


def span_crcs(buf: Buffer, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """CRC32C of ``buf[starts[k]:ends[k]]`` for every k.

    Args:
        buf: The bytes.
        starts: int64 span starts.
        ends: int64 span ends.

    Returns:
        ``uint32`` CRCs, one per span (the compiled module: one call without the GIL; without
        it, the pure-Python loop).

    Raises:
        ValueError: A span lies outside ``buf``.
    """
    out = np.empty(len(starts), dtype=np.uint32)
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    ends = np.ascontiguousarray(ends, dtype=np.int64)
    native = _accel.native
    if native is not None:
        native.crcs(buf, starts, ends, out, _crc32c.crc32c)
        return out
    view, crc = memoryview(buf), _crc32c.crc32c
    for k, (a, b) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        if not 0 <= a <= b <= len(view):
            raise ValueError(f"span {k} [{a}, {b}) is outside the buffer")
        out[k] = crc(view[a:b])
    return out


class RecordSink(Protocol):
    """Sees every record a scan accepts, in order, while its bytes are at hand (the
    TensorBoard events index, :mod:`ofindex.events`, is built in the scan that builds the
    sidecar)."""

    def records(self, block: memoryview, at: np.ndarray, lengths: np.ndarray,
                first: int) -> None:
        """Records ``first, first + 1, …`` whose framing starts at ``at`` in ``block``, with
        payloads of ``lengths`` bytes (the block is reused after the call)."""
        ...

    def streamed(self, offset: int, length: int, record: int) -> None:
        """Record ``record``, at byte ``offset`` of the file with a payload of ``length``
        bytes, was too large for a block: read it again if needed."""
        ...


@dataclasses.dataclass
class ScanResult:
    """What one scan of a data file found: its records' offsets and how far they reach."""

    offsets: np.ndarray      # uint64 start of each record
    indexed_end: int         # byte just past the last indexed record
    partial: bool = False    # only a valid prefix was indexed
    problem: str | None = None
    checksums: np.ndarray | None = None  # uint32 CRC32C of each payload, when asked for
    open_tail: bool = False  # the data ends inside a record still being written


def scan_file(
    storage: Storage | ReadAhead | InflatedStream,
    path: str,
    fmt: RecordFormat,
    size: int,
    *,
    verify: bool = False,
    allow_partial: bool = False,
    block_size: int = 1 << 20,
    progress: Callable[[int], None] | None = None,
    threads: int = 2,
    checksums: bool = False,
    on_records: RecordsHook | None = None,
    start: int = 0,
    first_record: int = 0,
    open_tail: bool = False,
    sink: RecordSink | None = None,
) -> ScanResult:
    """Offsets of every record of ``path`` (``size`` bytes), checking the framing; with
    ``checksums`` also the CRC32C of every payload, computed from the blocks read (so the
    scan reads every byte: meant for streams and remote files, which it reads whole anyway);
    with ``on_records``, it is called with the payloads of the records accepted, a run at a
    time, in order (``on_records(buffer, starts, ends)``: payloads ``buffer[starts[i]:ends[i]]``,
    to be used before it returns), for the columns of the file (the scan then reads every byte
    too).

    ``start`` and ``first_record`` scan only the records from byte ``start`` on, numbered from
    ``first_record`` (a file that grew since it was indexed: :mod:`ofindex.index.growth`);
    ``open_tail`` takes data that ends inside a record as a record still being written: the
    records before it are the result (``open_tail`` set), not a truncated file. ``sink`` sees
    every record accepted, from the blocks read (every byte is read then).

    Raises :class:`CorruptRecordError` / :class:`TruncatedRecordError` naming the file, byte
    offset and record number; with ``allow_partial`` returns the valid prefix instead (and
    warns). Through an :class:`InflatedStream` (``size`` is then ignored) the offsets are in the
    uncompressed stream, and bad compressed data raises the same errors naming the compressed
    offset.
    """
    # Local TFRecord payloads are checked in a second pass over the records found, on
    # threads (see ofindex.index.verify); other storage checks them in the one pass it reads.
    local = storage if isinstance(storage, Storage) and storage.is_local else None
    crc_pass = verify and local is not None and fmt is RecordFormat.TFRECORD
    scan = _Scan(storage, path, fmt, size, verify and not crc_pass, block_size, progress,
                 checksums, on_records, sink)
    scan.pos, scan.count, scan.first = start, first_record, first_record
    inflate_failed = scanned = False
    try:
        try:
            scan.run()
            scanned = True
        except InflateFailure as failure:
            assert isinstance(storage, InflatedStream)
            inflate_failed = True  # every record taken so far is whole: the prefix ends at pos
            raise failure.error(scan.url, scan.count, storage.compression) from None
        offsets, end = scan.offsets(), scan.pos
        if crc_pass and local is not None:
            verify_crcs(local, path, offsets, end, threads=threads)
    except (CorruptRecordError, TruncatedRecordError) as caught:
        exc = caught
        if open_tail and isinstance(exc, TruncatedRecordError):  # not yet written: not damage
            offsets, end = _prefix(scan, exc, at_pos=inflate_failed)
            if crc_pass and local is not None and not scanned:
                verify_crcs(local, path, offsets, end, threads=threads)
            return ScanResult(offsets, end, open_tail=True,
                              checksums=scan.checksums(len(offsets)))
        if isinstance(storage, InflatedStream) and not inflate_failed:
            at = exc.offset if exc.offset is not None else scan.pos
            exc = in_stream_error(exc, storage.compression, storage.compressed_offset_near(at))
        if not allow_partial:
            raise exc from None
        offsets, end = _prefix(scan, exc, at_pos=inflate_failed)
        if crc_pass and local is not None and not scanned:  # the prefix's payloads are
            try:                                            # not checked yet
                verify_crcs(local, path, offsets, end, threads=threads)
            except CorruptRecordError as bad:
                exc = bad
                offsets, end = _prefix(scan, bad, offsets)
        warnings.warn(
            f"{scan.url}: indexing only the first {len(offsets)} records (bytes [0, {end})) of "
            f"{size} bytes because: {exc}",
            stacklevel=2,
        )
        return ScanResult(offsets, end, partial=True, problem=str(exc),
                          checksums=scan.checksums(len(offsets)))
    return ScanResult(offsets, end, checksums=scan.checksums(len(offsets)))


def _prefix(scan: _Scan, exc: CorruptRecordError, offsets: np.ndarray | None = None, *,
            at_pos: bool = False) -> tuple[np.ndarray, int]:
    """The records before the one ``exc`` names, and where they end (``scan.pos`` when
    ``at_pos``, or when ``exc`` names no offset)."""
    offsets = scan.offsets() if offsets is None else offsets
    kept = None if exc.record is None else exc.record - scan.first
    if kept is not None and 0 <= kept < len(offsets):
        offsets = offsets[:kept]
    return offsets, exc.offset if exc.offset is not None and not at_pos else scan.pos


def _word_views(buffer: bytearray) -> list[memoryview]:
    mv = memoryview(buffer)
    n = len(buffer)
    return [mv[a : a + (n - a) // 8 * 8].cast("Q") for a in range(8)]


class _Scan:
    """State of one pass over a file: position and the offsets accepted so far."""

    def __init__(self, storage: Storage | ReadAhead | InflatedStream, path: str,
                 fmt: RecordFormat, size: int, verify: bool, block_size: int,
                 progress: Callable[[int], None] | None, checksums: bool = False,
                 on_records: RecordsHook | None = None,
                 sink: RecordSink | None = None) -> None:
        self.stream = isinstance(storage, InflatedStream)
        self.storage, self.path, self.fmt = storage, path, fmt
        self.size = UNKNOWN_SIZE if self.stream else size
        self.url = storage.url(path)
        # a small file gets a buffer its size, not a whole block (a stream's size is unknown)
        if not self.stream:
            block_size = min(block_size, max(size, _HEADER_READ))
        self.verify, self.block_size, self.progress = verify, block_size, progress
        self.found: list[np.ndarray] = []
        self.singles: list[int] = []  # offsets found one per read, not yet in ``found``
        self.count = 0
        self.first = 0  # the number of the first record scanned
        self.pos = 0
        self.buffer = bytearray(block_size)
        # little-endian uint64 views of the buffer at the 8 alignments: reading a length is
        # then two subscripts and no call (about a third faster than struct.unpack_from)
        self.words = _word_views(self.buffer) if sys.byteorder == "little" else None
        self.starts: np.ndarray | None = None  # the compiled walk's output, reused
        # payload CRC32Cs of the records accepted so far (with checksums)
        self.sums: list[np.ndarray] | None = [] if checksums else None
        self.on_records = on_records  # the columns' hook: every record whole in a block
        self.sink = sink  # sees every record accepted (the events index)
        #: whether every record accepted must lie whole in the block read (its bytes used)
        self.whole = (verify or self.stream or checksums or on_records is not None
                      or sink is not None)

    def checksums(self, count: int) -> np.ndarray | None:
        """The payload CRC32Cs of the first ``count`` records accepted, or ``None``."""
        if self.sums is None:
            return None
        sums = np.concatenate(self.sums) if self.sums else np.empty(0, dtype=np.uint32)
        return sums[:count]

    def _sum(self, at: np.ndarray, lengths: np.ndarray) -> None:
        """Note the payload CRC32Cs of records at ``at`` (in the buffer) of ``lengths``, and
        hand the records to the sink (before they are accepted: numbered from ``count``) and
        their payloads to the columns' hook."""
        if not len(at):
            return
        if self.sink is not None:
            self.sink.records(memoryview(self.buffer), at, lengths, self.count)
        if self.sums is None and self.on_records is None:
            return
        first = at.astype(np.int64) + self.fmt.header_size
        last = first + lengths.astype(np.int64)
        if self.sums is not None:
            self.sums.append(span_crcs(self.buffer, first, last))
        if self.on_records is not None:
            self.on_records(self.buffer, first, last)

    def offsets(self) -> np.ndarray:
        self._flush_singles()
        return np.concatenate(self.found) if self.found else np.empty(0, dtype=np.uint64)

    def _flush_singles(self) -> None:
        if self.singles:
            self.found.append(np.array(self.singles, dtype=np.uint64))
            self.singles = []

    def _accept(self, at: np.ndarray, base: int) -> None:
        self._flush_singles()
        if len(at):
            self.found.append((at + base).astype(np.uint64))
            self.count += len(at)

    def _walk_large(self, pos: int) -> int:
        """Read header after header with small reads while records stay large; returns where
        to go on (the start of a small record, the end of the file, or a header to report)."""
        fmt, size, hs, ov = self.fmt, self.size, self.fmt.header_size, self.fmt.overhead
        read, path, url = self.storage.read, self.path, self.url
        singles, progress = self.singles, self.progress
        while size - pos >= hs:
            length = parse_header(read(path, pos, pos + hs), fmt, path=url, offset=pos,
                                  record=self.count, file_size=size)
            singles.append(pos)
            self.count += 1
            if progress is not None:
                progress(ov + length)
            pos += ov + length
            if length + ov < _SEEK_THRESHOLD:
                break
        return pos

    def _walk(self, n: int) -> tuple[np.ndarray, int]:
        """Record starts in ``buffer[:n]`` and where the walk stopped (see csrc/walk.c).

        Compiled: the GIL is released, so builds of several files run on threads at once.
        """
        hs, ov = self.fmt.header_size, self.fmt.overhead
        native = _accel.native
        if native is not None:
            if self.starts is None:
                self.starts = np.empty(self.block_size // ov + 1, dtype=np.int64)
            count, end = native.walk(self.buffer, n, hs, ov, self.starts)
            return self.starts[:count], end
        local: list[int] = []
        append = local.append
        p, lim, words = 0, n - hs, self.words
        if words is not None:  # the length at p is word p >> 3 of the view aligned to p & 7
            while p <= lim:
                append(p)
                p += words[p & 7][p >> 3] + ov
        else:
            buffer = self.buffer
            while p <= lim:
                append(p)
                p += _LEN(buffer, p)[0] + ov
        return np.array(local, dtype=np.int64), p

    def _stream(self) -> InflatedStream:
        assert isinstance(self.storage, InflatedStream)
        return self.storage

    def _stream_end(self) -> int:
        """The decompressed stream's size once known, else :data:`UNKNOWN_SIZE`."""
        end = self._stream().end
        return UNKNOWN_SIZE if end is None else end

    def run(self) -> None:
        """Scan the whole file (or stream), block by block, from :attr:`pos`."""
        size, hs = self.size, self.fmt.header_size
        buffer = self.buffer
        headers_only = self.storage.is_local and not self.whole
        read_size = min(_HEADER_READ, self.block_size) if headers_only else self.block_size
        while self.pos < size:
            pos = self.pos
            window = memoryview(buffer)[: min(read_size, size - pos)]
            n = self.storage.read_into(self.path, pos, window)
            if self.stream:  # the stream's size is known once its end is reached
                size = self.size = self._stream_end()
                if pos >= size:
                    break
                if n < hs:  # the data stops short of a header: inflating failed there?
                    self._stream().raise_failure()
            if n < hs:
                parse_header(memoryview(buffer)[:n], self.fmt, path=self.url, offset=pos,
                             record=self.count, file_size=size)
            # 1. walk the headers inside this block (1 MiB holds at most 2**17 of them)
            at, p = self._walk(n)
            if len(at) == 1 and headers_only and n < self.block_size:
                self.pos = self._walk_large(pos)  # large records: header reads only
                if self.pos - pos < _SEEK_THRESHOLD:
                    read_size = self.block_size
                continue
            nxt, kept = self._take_block(at, p, pos, n, size)
            if self.progress is not None:
                self.progress(min(nxt, size) - pos)
            if headers_only:
                avg = (nxt - pos) / max(kept, 1)
                read_size = _HEADER_READ if avg >= _SEEK_THRESHOLD else self.block_size
            self.pos = nxt

    def _take_block(self, at: np.ndarray, p: int, pos: int, n: int,
                    size: int) -> tuple[int, int]:
        """Check the records whose headers the walk found at ``at`` in the block read at
        ``pos`` (``n`` bytes; the walk stopped at ``p``) and accept the good ones: when
        verifying, streaming or summing, only those wholly inside the block (with CRCs).

        Returns:
            Where the next block starts, and how many records were taken from this one.

        Raises:
            CorruptRecordError, TruncatedRecordError: A bad record (the ones before it are
                accepted first).
        """
        fmt, buffer, hs, ov = self.fmt, self.buffer, self.fmt.header_size, self.fmt.overhead
        lengths, problem = check_headers(buffer, at, p, pos, n, size, fmt, self.url, self.count)
        keep = len(lengths)
        if self.whole and problem is None:
            keep = int(np.searchsorted(at[:keep] + ov + lengths, n, side="right"))
        if self.verify and keep and fmt is RecordFormat.TFRECORD:
            bad = first_bad_data_crc(buffer, at[:keep], lengths[:keep], hs)
            if bad is not None:
                self._sum(at[:bad], lengths[:bad])
                self._accept(at[:bad], pos)
                raise data_crc_problem(buffer, int(at[bad]), int(lengths[bad]), hs,
                                       url=self.url, base=pos, record=self.count)
        self._sum(at[:keep], lengths[:keep])
        self._accept(at[:keep], pos)
        if problem is not None:
            raise problem
        if keep:
            return pos + int(at[keep - 1]) + ov + int(lengths[keep - 1]), keep
        # verifying, and the first record runs past the block: stream it
        kept = bytearray() if self.on_records is not None else None
        nxt, value = verify_streaming(self.storage, self.path, self.url, pos + int(at[0]),
                                      size, fmt, self.count, buffer, crc=self.verify,
                                      checksum=self.sums is not None, keep=kept)
        if self.sums is not None:
            self.sums.append(np.array([value], dtype=np.uint32))
        if self.on_records is not None and kept is not None:
            self.on_records(kept, np.zeros(1, dtype=np.int64),
                            np.array([len(kept)], dtype=np.int64))
        if self.sink is not None:
            self.sink.streamed(pos + int(at[0]), nxt - pos - int(at[0]) - self.fmt.overhead,
                               self.count)
        self._accept(at[:1], pos)
        return nxt, 0
