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

import crc32c as _crc32c
import numpy as np

from ..errors import SidecarError
from ..storage import FileStamp, Storage
from .framing import RecordFormat
from .packed_offsets import pack_offsets, unpack_offsets
from .seekpoints import SeekTable, empty_table, table_from_bytes
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


class Sidecar:
    """An opened sidecar: the header and views of its sections (memory-mapped or in memory).

    Attributes:
        path: Where it was read from (for messages).
        header: The decoded header.
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
    """

    __slots__ = ("_buf", "_mv", "_overhead", "_seeks", "body_checked", "checksums",
                 "compressed", "header", "indexed_end", "offsets", "path", "seek_points", "sums",
                 "windows")

    def __init__(self, path: str, header: SidecarHeader, body: mmap.mmap | bytes) -> None:
        self.path = path
        self.header = header
        self._buf = body
        self.body_checked = False
        n = header.count
        lay = layout_of(header)
        if len(body) != lay.end:
            raise SidecarError(
                f"{path}: sidecar is {len(body)} bytes but its header promises {lay.end} "
                f"({n} records); it is truncated or corrupt — rebuild it with `ofindex build`"
            )
        if header.packed:  # version 3: decoded now, then read like the plain offsets
            blob = memoryview(body)[lay.offsets[0] : lay.offsets[1]]
            q = header.packed_bytes
            if any(blob[q:]):
                raise SidecarError(f"{path}: the padding after the sidecar's packed offsets is "
                                   "not zero; it is corrupt — rebuild it with `ofindex build`")
            self.offsets = unpack_offsets(blob[:q], n, header.indexed_end, path=path)
            self._mv = self.offsets.data.cast("B").cast("Q")
        else:
            self.offsets = np.frombuffer(body, dtype="<u8", count=n, offset=lay.offsets[0])
            self._mv = memoryview(body)[lay.offsets[0] : lay.offsets[1]].cast("Q")
        self.checksums = (np.frombuffer(body, dtype="<u4", count=n, offset=lay.checksums[0])
                          if header.checksums else None)
        self.sums = (memoryview(body)[lay.checksums[0] : lay.checksums[0] + 4 * n].cast("I")
                     if header.checksums else None)
        mv = memoryview(body)
        self.seek_points = (table_from_bytes(mv[lay.seek_points[0] : lay.seek_points[1]],
                                             header.seek_points)
                            if header.seek_points else empty_table())
        self.windows = mv[lay.windows[0] : lay.windows[1]]
        self._overhead = header.format.overhead  # no record's span is shorter
        self.indexed_end = header.indexed_end
        self.compressed = header.compression is not Compression.NONE
        self._seeks: SeekTable | None = None
        if self.compressed and not header.seek_points:
            raise SidecarError(f"{path}: a compressed file's sidecar without seek points; "
                               "rebuild it with `ofindex build`")

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
    def decoded_bytes(self) -> int:
        """Bytes held in memory besides the sidecar's own: its packed offsets, decoded."""
        return self.offsets.nbytes if self.header.packed else 0

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
        records from the page cache), once.

        Args:
            data_url: The data file, for the message.

        Raises:
            SidecarError: The body is corrupt.
        """
        if not self.body_checked:
            _check_body(self.path, self.header, self._buf, data_url)
            self.body_checked = True


def _check_body(path: str, header: SidecarHeader, buf: mmap.mmap | bytes,
                data_url: str | None = None) -> None:
    body = memoryview(buf)[header.header_size :]
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
    packed: bool = True,
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
        packed_bytes=packed_bytes or 0,
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
    return encode_header(dataclasses.replace(header, stamp=stamp)) + raw[HEADER_SIZE:]


def parse_sidecar(buf: bytes, *, path: str, data_url: str | None = None) -> Sidecar:
    """Make a sidecar from its whole content held in memory (remote storage), its body checked
    against its CRC (cheap next to fetching it: a byte flipped in transit is not cached).

    Raises:
        SidecarError: The content is not a valid sidecar.
    """
    header = decode_header(buf, path=path)
    checked = len(buf) == layout_of(header).end  # else the Sidecar says it is truncated
    if checked:
        _check_body(path, header, buf, data_url)  # before the packed offsets are decoded
    sidecar = Sidecar(path, header, buf)
    sidecar.body_checked = checked
    return sidecar


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
    checked = header.packed and size == layout_of(header).end
    if checked:
        _check_body(path, header, mm)
    sidecar = Sidecar(path, header, mm)
    sidecar.body_checked = checked
    return sidecar


def load_sidecar(storage: Storage, path: str) -> Sidecar:
    """Open the sidecar at ``path`` on ``storage``: memory-mapped when local, else fetched whole.

    Raises:
        FileNotFoundError: There is no sidecar at ``path``.
        SidecarError: The file is not a valid sidecar.
    """
    if storage.is_local:
        return open_local_sidecar(path)
    return parse_sidecar(storage.read_all(path), path=storage.url(path))
