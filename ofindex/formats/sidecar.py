"""The binary sidecar index: one per data file, ``<data file>.ofidx`` by default.

A sidecar is a fixed header (:mod:`.sidecar_header`) and a body: one uint64 offset per record
(the start of its framing; for a compressed file, in the uncompressed stream, and packed:
:mod:`.packed_offsets`), optionally one CRC32C per payload, and for a compressed file the seek
points and their windows (:mod:`.seekpoints`). Locally a sidecar is memory-mapped: opening
one reads its header only (and for a compressed file, the packed offsets, decoded at once).
Sidecars are written once, to a temporary name and renamed, so readers never see a torn one.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
from typing import Any

import crc32c as _crc32c
import numpy as np

from ..errors import SidecarError
from ..storage import FileStamp, Storage
from .framing import RecordFormat
from .packed_offsets import pack_offsets, unpack_offsets
from .seekpoints import NO_SEEK_POINTS, SEEK_DTYPE, SeekTable, table_from_bytes
from .sidecar_growth import (
    Growth,
    check_segment_body,
    parse_segments,
    restamp_segment,
    segment_offsets,
    segment_points,
)
from .sidecar_header import (
    HEADER_SIZE,
    VERSION,
    VERSION_PACKED,
    Compression,
    SidecarHeader,
    body_layout,
    decode_header,
    encode_header,
    layout_of,
)

SUFFIX = ".ofidx"

__all__ = ["SUFFIX", "Sidecar", "SidecarHeader", "decode_header", "encode_header",
           "encode_sidecar", "load_sidecar", "open_local_sidecar", "parse_sidecar", "restamped"]


class _Tail:
    """A numpy array that grows at its end in amortized time proportional to what is added
    (its buffer doubles): a sidecar extended again and again by :meth:`Sidecar.extended`
    (a file followed as it is written) copies its records once, not once per growth.

    Args:
        first: The array's first elements (copied).
        more: Elements about to be added (room is made for them).
    """

    __slots__ = ("buf", "used")

    def __init__(self, first: np.ndarray, more: int) -> None:
        n = len(first)
        self.buf = np.empty(max(2 * n, n + more, 16), dtype=first.dtype)
        self.buf[:n] = first
        self.used = n

    def append(self, added: np.ndarray) -> np.ndarray:
        """Add ``added`` at the end; returns a view of every element so far."""
        need = self.used + len(added)
        if need > len(self.buf):
            bigger = np.empty(max(2 * len(self.buf), need), dtype=self.buf.dtype)
            bigger[: self.used] = self.buf[: self.used]
            self.buf = bigger
        self.buf[self.used : need] = added
        self.used = need
        view: np.ndarray = self.buf[:need]
        view.flags.writeable = False
        return view

    @staticmethod
    def extend(current: np.ndarray, tail: _Tail | None, added: np.ndarray) -> tuple[
            np.ndarray, _Tail]:
        """``current`` followed by ``added``: in ``tail``'s buffer when ``current`` is all of
        it (no other extension took the room after it), else in a new one."""
        if tail is None or len(current) != tail.used or (
                len(current) and not np.shares_memory(current[:1], tail.buf[:1])):
            tail = _Tail(current, len(added))
        return tail.append(added), tail


class Sidecar:
    """An opened sidecar: the header and views of its sections (memory-mapped or in memory).

    A sidecar that grew with its data file (:mod:`.sidecar_growth`) is read as of its last
    whole segment: :attr:`header` then states the grown index, and its sections hold the
    base's and every segment's records (copied into memory); :meth:`state_at` gives it as of
    an earlier segment.

    Attributes:
        path: Where it was read from (for messages).
        header: The decoded header, as of the state read (the grown index's, for a sidecar
            with growth segments).
        base: The sidecar's own header (its first bytes).
        offsets: ``uint64[count]``: where each record's framing starts.
        checksums: ``uint32[count]`` CRC32C of each payload, or ``None``.
        sums: The same checksums as a memoryview (``sums[i]`` is a plain int, cheaper than
            indexing the array on a hot path), or ``None``.
        seek_points: The seek table of a compressed file (see :mod:`.seekpoints`).
        windows: The windows blob of a compressed file.
        indexed_end: Byte just past the last indexed record.
        compressed: The data file is compressed (its offsets are in the uncompressed stream).
        body_checked: The body was checked against its CRC (:meth:`check_offsets`); a fetched
            sidecar is checked when parsed, a memory-mapped one when its shard is first read.
        segments: The growth segments read, up to the state read.
    """

    __slots__ = ("_buf", "_copied", "_mv", "_overhead", "_seeks", "_tails", "base",
                 "body_checked", "checksums", "compressed", "header", "indexed_end", "offsets",
                 "path", "seek_points", "segments", "sums", "windows")

    def __init__(self, path: str, header: SidecarHeader, body: mmap.mmap | bytes, *,
                 check_now: bool = False, data_url: str | None = None) -> None:
        self.path = path
        self.base = self.header = header
        self._buf = body
        self.body_checked = False
        n = header.count
        lay = layout_of(header)
        if len(body) < lay.end:
            raise SidecarError(
                f"{path}: sidecar is {len(body)} bytes but its header promises {lay.end} "
                f"({n} records); it is truncated or corrupt — rebuild it with `ofindex build`"
            )
        self.segments = (parse_segments(body, lay.end, header, path=path)
                         if len(body) > lay.end else [])
        if check_now:  # before anything is decoded from the bodies
            _check_body(path, header, body, data_url, end=lay.end)
            self._check_segments()
            self.body_checked = True
        if header.packed:  # version 3: decoded now, then read like the plain offsets
            blob = memoryview(body)[lay.offsets[0] : lay.offsets[1]]
            q = header.packed_bytes
            if any(blob[q:]):
                raise SidecarError(f"{path}: the padding after the sidecar's packed offsets is "
                                   "not zero; it is corrupt — rebuild it with `ofindex build`")
            self.offsets = unpack_offsets(blob[:q], n, header.indexed_end, path=path)
        else:
            self.offsets = np.frombuffer(body, dtype="<u8", count=n, offset=lay.offsets[0])
        self.checksums = (np.frombuffer(body, dtype="<u4", count=n, offset=lay.checksums[0])
                          if header.checksums else None)
        mv = memoryview(body)
        self.seek_points = (table_from_bytes(mv[lay.seek_points[0] : lay.seek_points[1]],
                                             header.seek_points)
                            if header.seek_points else NO_SEEK_POINTS)
        self.windows: bytes | memoryview = mv[lay.windows[0] : lay.windows[1]]
        self._overhead = header.format.overhead  # no record's span is shorter
        self._tails: dict[str, _Tail] = {}
        self._copied = self.offsets.nbytes if header.packed else 0
        if self.segments:
            self._join_segments()
        self._settle()
        if self.compressed and not header.seek_points:
            raise SidecarError(f"{path}: a compressed file's sidecar without seek points; "
                               "rebuild it with `ofindex build`")

    def _settle(self) -> None:
        """Derive the hot paths' views from the sections (after any change of state)."""
        header = self.header
        self._mv = np.ascontiguousarray(self.offsets).data.cast("B").cast("Q")
        self.sums = (np.ascontiguousarray(self.checksums).data.cast("B").cast("I")
                     if self.checksums is not None else None)
        self.indexed_end = header.indexed_end
        self.compressed = header.compression is not Compression.NONE
        self._seeks: SeekTable | None = None

    def _check_segments(self) -> None:
        previous = self.base.body_crc
        for segment in self.segments:
            check_segment_body(self._buf, segment, previous, path=self.path)
            previous = segment.header.body_crc

    def _join_segments(self) -> None:
        """Take the records, checksums and seek points of the growth segments (copied)."""
        offsets, sums, points = [self.offsets], [self.checksums], [self.seek_points]
        windows = [bytes(self.windows)]
        end, blob = self.base.indexed_end, len(self.windows)
        for segment in self.segments:
            offsets.append(segment_offsets(self._buf, segment, self.base, end, path=self.path))
            if self.checksums is not None:
                a, b = segment.checksums
                sums.append(np.frombuffer(self._buf, dtype="<u4", count=(b - a) // 4,
                                          offset=a))
            added = np.array(segment_points(self._buf, segment))
            added["window_at"] += blob
            points.append(added)
            a, b = segment.windows
            windows.append(bytes(memoryview(self._buf)[a:b]))
            end, blob = segment.header.indexed_end, blob + (b - a)
        self.offsets = np.concatenate(offsets)
        self.checksums = (None if self.checksums is None
                          else np.concatenate([s for s in sums if s is not None]))
        self.seek_points = np.concatenate(points)
        self.windows = b"".join(windows)
        self.header = self.segments[-1].header
        self._copied = self.offsets.nbytes + (
            0 if self.checksums is None else self.checksums.nbytes) + len(self.windows)

    def state_at(self, count: int, body_crc: int | None) -> Sidecar | None:
        """This sidecar as of the state (its own, or a growth segment's) that has ``count``
        records and, when given, the chained body CRC ``body_crc``: what a manifest written
        before the index grew describes.

        Args:
            count: The record count expected.
            body_crc: The body CRC expected, or ``None`` (any).

        Returns:
            A sidecar sharing this one's sections (``self`` for its last state), or ``None``
            when no state matches.
        """
        states = [self.base] + [s.header for s in self.segments]
        for k in range(len(states) - 1, -1, -1):
            h = states[k]
            if h.count == count and (body_crc is None or h.body_crc == body_crc):
                return self if k == len(states) - 1 else self._cut(k)
        return None

    def _cut(self, k: int) -> Sidecar:
        """A copy of this sidecar as of state ``k`` (0: its own header, else segment k)."""
        other = object.__new__(Sidecar)
        for name in Sidecar.__slots__:
            if hasattr(self, name):
                setattr(other, name, getattr(self, name))
        other.segments = self.segments[:k]
        h = self.base if k == 0 else self.segments[k - 1].header
        other.header = h
        other.offsets = self.offsets[: h.count]
        other.checksums = None if self.checksums is None else self.checksums[: h.count]
        other.seek_points = self.seek_points[: h.seek_points]
        other.windows = self.windows[: h.windows_bytes]
        other._tails = {}
        other._settle()
        return other

    def extended(self, growth: Growth) -> Sidecar:
        """This sidecar with ``growth`` added in memory (a data file that grew since, read
        without writing its index): in time proportional to the growth, amortized.

        Args:
            growth: What the grown file adds (see :mod:`ofindex.index.growth`).

        Returns:
            The grown sidecar (this one is left as it was).

        Raises:
            ValueError: ``growth`` does not continue this sidecar.
            SidecarError: This sidecar's body fails its CRC (it is checked first).
        """
        h = self.header
        if growth.header.count != h.count + growth.added or (
                (growth.checksums is None) != (self.checksums is None)):
            raise ValueError(f"{self.path}: a growth of {growth.added} records to "
                             f"{growth.header.count} does not continue {h.count} records")
        self.check_offsets()  # what is copied is checked first
        other = self._cut(len(self.segments))
        other._buf = b""  # every section is in memory now: no file is held
        tails = dict(self._tails)
        other.offsets, tails["offsets"] = _Tail.extend(
            self.offsets, tails.get("offsets"), np.asarray(growth.offsets, dtype=np.uint64))
        if self.checksums is not None and growth.checksums is not None:
            other.checksums, tails["sums"] = _Tail.extend(
                self.checksums, tails.get("sums"), np.asarray(growth.checksums, np.uint32))
        if len(growth.seek_points):
            added = np.array(growth.seek_points, dtype=SEEK_DTYPE)
            added["window_at"] += len(self.windows)
            other.seek_points, tails["points"] = _Tail.extend(
                self.seek_points, tails.get("points"), added)
            blob, tails["windows"] = _Tail.extend(
                np.frombuffer(self.windows, dtype=np.uint8), tails.get("windows"),
                np.frombuffer(growth.windows, dtype=np.uint8))
            other.windows = blob.data
        other.header = growth.header
        other._tails = tails
        other._copied = sum(t.buf.nbytes for t in tails.values())
        self._tails = {}  # the room after these arrays is the new sidecar's now
        other._settle()
        return other

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickle a sidecar held in memory (one extended by :meth:`extended`: a dataset's
        shard that grew, sent to a worker); one read from a file is opened again there."""
        if len(self._buf):
            raise TypeError(f"{self.path}: a sidecar read from its file is not pickled (its "
                            "shard opens it again in the new process)")
        return _in_memory, (self.path, self.header, self.base, np.array(self.offsets),
                            None if self.checksums is None else np.array(self.checksums),
                            np.array(self.seek_points), bytes(self.windows))

    @property
    def seeks(self) -> SeekTable:
        """The checked seek table of a compressed file (built on first use).

        Raises:
            SidecarError: The seek points are corrupt.
        """
        if self._seeks is None:
            h = self.header
            self._seeks = SeekTable(self.seek_points, self.windows, h.stamp.size,
                                    h.uncompressed_size, self.path)
        return self._seeks

    @property
    def raw(self) -> mmap.mmap | bytes:
        """The bytes this sidecar was read from (its memory map, or its fetched content)."""
        return self._buf

    @property
    def complete_end(self) -> int:
        """Where the state read ends in :attr:`raw`: the body's end, or the last growth
        segment's (what follows is not part of it: a segment being appended)."""
        return self.segments[-1].end if self.segments else layout_of(self.base).end

    @property
    def decoded_bytes(self) -> int:
        """Bytes held in memory besides the sidecar's own: its packed offsets, decoded, and
        what growth segments or an in-memory growth added."""
        return self._copied

    @property
    def format(self) -> RecordFormat:
        return self.header.format

    def __len__(self) -> int:
        return self.header.count

    def span(self, i: int) -> tuple[int, int]:
        """Byte range ``[start, end)`` of record ``i``'s framing (0 <= i < len), unchecked:
        callers on hot paths check ``start + format.overhead <= end <= indexed_end`` and
        raise :meth:`bad_span` themselves."""
        mv = self._mv
        start = mv[i]
        end = mv[i + 1] if i + 1 < len(mv) else self.indexed_end
        return start, end

    def spans(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised :meth:`span` for an int64 array of valid local record numbers, checked:
        a range that cannot hold a record (shorter than its framing, or past the indexed end,
        which the header keeps within the data file) raises :class:`SidecarError` before
        anything is read or allocated from it.

        Returns:
            ``(starts, ends)``, int64 arrays.
        """
        offsets, end = self.offsets, self.indexed_end
        starts = offsets[idx]
        if len(idx) == 0:
            return starts.astype(np.int64), starts.astype(np.int64)
        last = self.header.count - 1
        ends = offsets[np.minimum(idx + 1, last)]
        ends[idx == last] = end
        # unsigned comparisons, no arithmetic that can wrap: offsets come from a file
        bad = (ends > end) | (starts > ends) | (ends - starts < self._overhead)
        if bad.any():
            k = int(np.argmax(bad))
            raise self.bad_span(int(idx[k]), int(starts[k]), int(ends[k]))
        return starts.astype(np.int64), ends.astype(np.int64)

    def bad_span(self, record: int, start: int, end: int) -> SidecarError:
        """The error for a span that cannot hold a record: the offsets block is corrupt."""
        why = (f"past the indexed end {self.indexed_end}" if end > self.indexed_end else
               f"too short for a {self.format.name.lower()} record")
        return SidecarError(
            f"{self.path}: record {record}: the index gives the byte range [{start}, {end}), "
            f"{why}; the sidecar's offsets are corrupt — rebuild it with `ofindex build`"
        )

    @property
    def compression(self) -> Compression:
        """How the data file is compressed."""
        return self.header.compression

    def check_offsets(self, data_url: str | None = None) -> None:
        """Check the whole body against its CRC (reads all of it: about 0.7 ms per million
        records from the page cache), and every growth segment's against its chained CRC,
        once.

        Args:
            data_url: The data file, for the message.

        Raises:
            SidecarError: The body is corrupt.
        """
        if not self.body_checked:
            _check_body(self.path, self.base, self._buf, data_url,
                        end=layout_of(self.base).end)
            self._check_segments()
            self.body_checked = True


def _in_memory(path: str, header: SidecarHeader, base: SidecarHeader, offsets: np.ndarray,
               checksums: np.ndarray | None, seek_points: np.ndarray,
               windows: bytes) -> Sidecar:
    """A sidecar held in memory, as :meth:`Sidecar.__reduce__` pickled it."""
    sidecar = object.__new__(Sidecar)
    sidecar.path, sidecar.header, sidecar.base = path, header, base
    sidecar._buf, sidecar.body_checked, sidecar.segments = b"", True, []
    sidecar.offsets, sidecar.checksums = offsets, checksums
    sidecar.seek_points, sidecar.windows = seek_points, windows
    sidecar._overhead = header.format.overhead
    sidecar._tails = {}
    sidecar._copied = offsets.nbytes + (0 if checksums is None else checksums.nbytes)
    sidecar._settle()
    return sidecar


def _check_body(path: str, header: SidecarHeader, buf: mmap.mmap | bytes,
                data_url: str | None = None, *, end: int | None = None) -> None:
    body = memoryview(buf)[header.header_size : end]
    try:
        crc = _crc32c.crc32c(body)
    finally:
        body.release()
    if crc != header.body_crc:
        raise SidecarError(
            f"{path}: the sidecar's body (record offsets{', checksums' if header.checksums else ''}"
            f"{', seek points' if header.seek_points else ''}) fails its CRC (stored "
            f"0x{header.body_crc:08x}, computed 0x{crc:08x}): it is corrupt, and no record is "
            f"read through it — rebuild it with "
            + (f"`ofindex build {data_url}`" if data_url else "`ofindex build` on its data file")
        )


def encode_sidecar(
    fmt: RecordFormat, offsets: np.ndarray, stamp: FileStamp, indexed_end: int,
    partial: bool = False, *, checksums: np.ndarray | None = None,
    compression: Compression = Compression.NONE, seek_points: np.ndarray | None = None,
    windows: bytes = b"", spacing: int = 0, uncompressed_size: int | None = None,
    packed: bool = True, open_tail: bool = False,
) -> tuple[bytes, bytes]:
    """Encode a sidecar: its header and its body, ready to write. A compressed file's offsets
    are packed (version 3); an uncompressed file's are plain (version 2, readable by pages).

    Args:
        fmt: The record framing.
        offsets: Where each record's framing starts.
        stamp: The data file's size and fingerprint.
        indexed_end: Byte just past the last indexed record.
        partial: Only a valid prefix of the file is indexed.
        checksums: CRC32C of each payload (one per record), or ``None``.
        compression: How the data file is compressed.
        seek_points: The seek table (compressed files).
        windows: The windows blob the seek table points into.
        spacing: Uncompressed bytes between seek points the index was built with.
        uncompressed_size: Size of the decompressed stream (default: the file size).
        packed: ``False`` writes a compressed file's offsets plain too (version 2, what
            earlier releases wrote).
        open_tail: The data file was being written: the bytes after ``indexed_end`` are a
            record not yet whole.

    Returns:
        ``(header, body)``.

    Raises:
        ValueError: ``checksums`` has another length than ``offsets``.
    """
    n = len(offsets)
    blob = None
    if packed and compression is not Compression.NONE:
        blob = pack_offsets(offsets)
        parts = [blob + bytes(-len(blob) % 8)]
    else:
        parts = [np.ascontiguousarray(offsets, dtype="<u8").tobytes()]
    if checksums is not None:
        if len(checksums) != n:
            raise ValueError(f"{len(checksums)} checksums for {n} records")
        raw = np.ascontiguousarray(checksums, dtype="<u4").tobytes()
        parts.append(raw + bytes(-len(raw) % 8))
    m = 0
    if seek_points is not None and len(seek_points):
        m = len(seek_points)
        parts.append(np.ascontiguousarray(seek_points).tobytes())
        parts.append(bytes(windows))
    body = b"".join(parts)
    packed_bytes = None if blob is None else len(blob)
    lay = body_layout(HEADER_SIZE, n, checksums=checksums is not None, seek_points=m,
                      windows_bytes=len(windows) if m else 0, packed_bytes=packed_bytes)
    assert lay.end == HEADER_SIZE + len(body)
    header = encode_header(SidecarHeader(
        fmt, n, stamp, indexed_end, partial, body_crc=_crc32c.crc32c(body),
        version=VERSION if packed_bytes is None else VERSION_PACKED,
        checksums=checksums is not None, compression=compression, seek_points=m,
        windows_bytes=len(windows) if m else 0, spacing=spacing,
        uncompressed_size=-1 if uncompressed_size is None else uncompressed_size,
        packed_bytes=packed_bytes or 0, open_tail=open_tail,
    ))
    return header, body


def restamped(raw: bytes, stamp: FileStamp, *, path: str) -> bytes:
    """A whole sidecar with its data file's stamp replaced (the body, and so its CRC, kept):
    the same records, found in a copy of the file with another fingerprint, or a digest added
    to an index that had none.

    Args:
        raw: The sidecar's bytes.
        stamp: The data file's stamp now, with its content digest.
        path: Where the sidecar was read from (for messages).

    Returns:
        The sidecar's new bytes.

    Raises:
        SidecarError: ``raw`` is not a sidecar of version 2 or 3.
    """
    header = decode_header(raw[:HEADER_SIZE], path=path)
    if header.header_size != HEADER_SIZE:
        raise SidecarError(f"{path}: a version 1 sidecar cannot be re-stamped; rebuild it "
                           "with `ofindex build`")
    end = layout_of(header).end
    segments = parse_segments(raw, end, header, path=path) if len(raw) > end else []
    if segments:  # a grown sidecar states its data file in its last segment
        return restamp_segment(raw, segments[-1], stamp)
    return encode_header(dataclasses.replace(header, stamp=stamp)) + raw[HEADER_SIZE:end]


def parse_sidecar(buf: bytes, *, path: str, data_url: str | None = None) -> Sidecar:
    """Make a sidecar from its whole content held in memory (remote storage), its body checked
    against its CRC (cheap next to fetching it: a byte flipped in transit is not cached).

    Raises:
        SidecarError: The content is not a valid sidecar.
    """
    header = decode_header(buf, path=path)
    # checked before the packed offsets are decoded (a short one: the Sidecar says so)
    return Sidecar(path, header, buf, check_now=len(buf) >= layout_of(header).end,
                   data_url=data_url)


def open_local_sidecar(path: str) -> Sidecar:
    """Memory-map a local sidecar; only the header is read now (and the packed offsets of a
    compressed file's sidecar, checked against the body CRC first). The offsets of other
    sidecars are checked when first used (:meth:`Sidecar.check_offsets`).

    Raises:
        FileNotFoundError: There is no file at ``path``.
        SidecarError: The file is not a valid sidecar.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            raise SidecarError(f"{path}: sidecar is empty; rebuild it with `ofindex build`")
        mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
    header = decode_header(mm[: min(size, 4096)], path=path)
    # packed offsets are decoded (read whole) at once: check them first, as when fetched
    return Sidecar(path, header, mm, check_now=header.packed and size >= layout_of(header).end)


def read_current_header(storage: Storage, path: str) -> tuple[SidecarHeader, int]:
    """The header of the sidecar at ``path`` as of its last whole growth segment (its own
    when it has none): its first bytes, then, when it is longer than they describe, the
    bytes after its body (growth segments: what was appended, not the whole sidecar).

    Args:
        storage: Storage of the sidecar.
        path: The sidecar.

    Returns:
        The header, checked, and the sidecar's size.

    Raises:
        FileNotFoundError: There is no sidecar at ``path``.
        SidecarError: It is not a valid sidecar.
    """
    url = storage.url(path)
    header = decode_header(storage.read(path, 0, HEADER_SIZE), path=url)
    end = layout_of(header).end
    size = storage.stamp(path).size
    if size <= end:
        return header, size
    segments = parse_segments(storage.read(path, end, size), end, header, path=url, origin=end)
    return (segments[-1].header, segments[-1].end) if segments else (header, end)


def load_sidecar(storage: Storage, path: str) -> Sidecar:
    """Open the sidecar at ``path`` on ``storage``: memory-mapped when local, else fetched whole.

    Raises:
        FileNotFoundError: There is no sidecar at ``path``.
        SidecarError: The file is not a valid sidecar.
    """
    if storage.is_local:
        return open_local_sidecar(path)
    return parse_sidecar(storage.read_all(path), path=storage.url(path))
