"""The binary sidecar index: one per data file, ``<data file>.ofidx`` by default.

Layout (little-endian)::

    0   8s  magic b"OFINDEX\\0"
    8   H   format version (1)
    10  B   record format (1 = TFRecord, 2 = OFRecord)
    11  B   flags (bit 0: partial — only a valid prefix of the data file is indexed)
    12  I   header size in bytes (a multiple of 8)
    16  Q   record count
    24  Q   data file size when indexed
    32  Q   indexed end: byte just past the last indexed record
    40  I   CRC32C of the offsets block
    44  I   CRC32C of the header with this field zeroed
    48  H   fingerprint length, then the fingerprint (UTF-8, e.g. "mtime_ns:…", "etag:…")
    ... zero padding to the header size
    header size + 8*i   Q   byte offset of record i (start of its framing)

Locally a sidecar is memory-mapped: opening one reads its header only.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import struct

import crc32c as _crc32c
import numpy as np

from ..errors import SidecarError, StaleIndexError
from ..storage import FileStamp, Storage
from .framing import RecordFormat

MAGIC = b"OFINDEX\0"
VERSION = 1
SUFFIX = ".ofidx"
FLAG_PARTIAL = 1

_FIXED = struct.Struct("<8sHBBIQQQIIH")
_HEADER_CRC_AT = 44


@dataclasses.dataclass(frozen=True)
class SidecarHeader:
    format: RecordFormat
    count: int
    stamp: FileStamp
    indexed_end: int
    partial: bool
    header_size: int
    offsets_crc: int


def encode_header(
    fmt: RecordFormat, count: int, stamp: FileStamp, indexed_end: int, partial: bool,
    offsets_crc: int,
) -> bytes:
    fp = stamp.fingerprint.encode("utf-8")
    if len(fp) > 0xFFFF:
        raise ValueError("fingerprint too long")
    raw = _FIXED.size + len(fp)
    header_size = (raw + 7) // 8 * 8
    fixed = _FIXED.pack(
        MAGIC, VERSION, int(fmt), FLAG_PARTIAL if partial else 0, header_size, count,
        stamp.size, indexed_end, offsets_crc, 0, len(fp),
    )
    buf = bytearray(fixed + fp + bytes(header_size - raw))
    struct.pack_into("<I", buf, _HEADER_CRC_AT, _crc32c.crc32c(buf))
    return bytes(buf)


def decode_header(buf: bytes, *, path: str) -> SidecarHeader:
    """Parse and check a sidecar header (``buf`` holds at least the whole header)."""
    if len(buf) < _FIXED.size or buf[:8] != MAGIC:
        raise SidecarError(
            f"{path}: not an ofindex sidecar (bad magic); delete it and rebuild the index "
            "with `ofindex build <data file>`"
        )
    (_, version, fmt, flags, header_size, count, size, end, ocrc, hcrc, fplen) = (
        _FIXED.unpack_from(buf)
    )
    if version != VERSION:
        raise SidecarError(
            f"{path}: sidecar format version {version} is not supported by this ofindex "
            f"(it reads version {VERSION}); rebuild with `ofindex build` or upgrade ofindex"
        )
    if header_size < _FIXED.size + fplen or header_size % 8 or len(buf) < header_size:
        raise SidecarError(f"{path}: sidecar header is corrupt; rebuild it with `ofindex build`")
    check = bytearray(buf[:header_size])
    struct.pack_into("<I", check, _HEADER_CRC_AT, 0)
    if _crc32c.crc32c(check) != hcrc:
        raise SidecarError(
            f"{path}: sidecar header CRC mismatch (torn or corrupt file); rebuild it with "
            "`ofindex build`"
        )
    try:
        record_format = RecordFormat(fmt)
    except ValueError:
        raise SidecarError(f"{path}: unknown record format code {fmt} in sidecar") from None
    fingerprint = bytes(buf[_FIXED.size : _FIXED.size + fplen]).decode("utf-8")
    return SidecarHeader(
        record_format, count, FileStamp(size, fingerprint), end, bool(flags & FLAG_PARTIAL),
        header_size, ocrc,
    )


class Sidecar:
    """An opened sidecar: the header plus the offsets (memory-mapped or in memory)."""

    __slots__ = ("_mmap", "_mv", "_overhead", "header", "indexed_end", "offsets", "path")

    def __init__(self, path: str, header: SidecarHeader, body: mmap.mmap | bytes) -> None:
        self.path = path
        self.header = header
        self._mmap = body
        n = header.count
        expected = header.header_size + 8 * n
        if len(body) != expected:
            raise SidecarError(
                f"{path}: sidecar is {len(body)} bytes but its header promises {expected} "
                f"({n} records); it is truncated or corrupt — rebuild it with `ofindex build`"
            )
        self.offsets = np.frombuffer(body, dtype="<u8", count=n, offset=header.header_size)
        self._mv = memoryview(body)[header.header_size :].cast("Q") if n else memoryview(b"")
        self._overhead = header.format.overhead  # no record's span is shorter
        self.indexed_end = header.indexed_end

    @property
    def format(self) -> RecordFormat:
        return self.header.format

    def __len__(self) -> int:
        return self.header.count

    def span(self, i: int) -> tuple[int, int]:
        """Byte range ``[start, end)`` of record ``i``'s framing (0 <= i < len), unchecked:
        callers on hot paths compare its length with ``format.overhead`` and raise
        :meth:`bad_span` themselves."""
        mv = self._mv
        start = mv[i]
        end = mv[i + 1] if i + 1 < len(mv) else self.indexed_end
        return start, end

    def spans(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised :meth:`span` for an int64 array of local record numbers; a range too
        short to hold a record (corrupt offsets) raises :class:`SidecarError`."""
        starts = self.offsets[idx].astype(np.int64)
        nxt = idx + 1
        inside = nxt < self.header.count
        ends = np.full(starts.shape, self.indexed_end, dtype=np.int64)
        ends[inside] = self.offsets[nxt[inside]]
        short = ends - starts < self._overhead
        if short.any():
            k = int(np.argmax(short))
            raise self.bad_span(int(idx[k]), int(starts[k]), int(ends[k]))
        return starts, ends

    def bad_span(self, record: int, start: int, end: int) -> SidecarError:
        """The error for a span too short to hold a record: the offsets block is corrupt."""
        return SidecarError(
            f"{self.path}: record {record}: the index gives the byte range [{start}, {end}), "
            f"too short for a {self.format.name.lower()} record; the sidecar's offsets are "
            "corrupt — rebuild it with `ofindex build`"
        )

    def check_offsets(self) -> None:
        """Full integrity check of the offsets block (reads all of it)."""
        if _crc32c.crc32c(self.offsets.tobytes()) != self.header.offsets_crc:
            raise SidecarError(
                f"{self.path}: offsets CRC mismatch; the sidecar is corrupt — rebuild it with "
                "`ofindex build`"
            )

    def check_fresh(self, current: FileStamp, data_path: str) -> None:
        """Raise :class:`StaleIndexError` unless ``current`` is the file this index describes."""
        why = self.header.stamp.mismatch(current)
        if why:
            raise StaleIndexError(
                f"{self.path}: index is stale for {data_path}: {why} since it was indexed; "
                f"rebuild it with `ofindex build {data_path}`"
            )


def encode_sidecar(
    fmt: RecordFormat, offsets: np.ndarray, stamp: FileStamp, indexed_end: int,
    partial: bool = False,
) -> tuple[bytes, bytes]:
    """Header and offsets block of a sidecar, ready to write."""
    body = np.ascontiguousarray(offsets, dtype="<u8").tobytes()
    header = encode_header(fmt, len(offsets), stamp, indexed_end, partial, _crc32c.crc32c(body))
    return header, body


def parse_sidecar(buf: bytes, *, path: str) -> Sidecar:
    """A sidecar from its whole content held in memory (remote storage)."""
    return Sidecar(path, decode_header(buf, path=path), buf)


def open_local_sidecar(path: str) -> Sidecar:
    """Memory-map a local sidecar; only the header is read now."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            raise SidecarError(f"{path}: sidecar is empty; rebuild it with `ofindex build`")
        mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
    header = decode_header(mm[: min(size, 4096)] if size else b"", path=path)
    if header.header_size > 4096:
        header = decode_header(mm[: header.header_size], path=path)
    return Sidecar(path, header, mm)


def load_sidecar(storage: Storage, path: str) -> Sidecar:
    """Open the sidecar at ``path`` on ``storage``: memory-mapped when local, else fetched whole.

    Raises:
        FileNotFoundError: There is no sidecar at ``path``.
        SidecarError: The file is not a valid sidecar.
    """
    if storage.cheap_seeks:
        return open_local_sidecar(path)
    return parse_sidecar(storage.read_all(path), path=storage.url(path))
