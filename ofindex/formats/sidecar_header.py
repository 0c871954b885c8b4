"""The header of a sidecar file, versions 1, 2 and 3 (all little-endian).

Version 2 (written since 0.2, for uncompressed data files) has one fixed-size header, so that
the byte range of any record's offset follows from the record number alone (paged reads of
remote sidecars). Version 3 (compressed data files) has the same header, with the length of
the packed offsets in the 8 bytes at 88 that version 2 reserves::

    0    8s  magic b"OFINDEX\\0"
    8    H   format version (2, or 3: offsets packed)
    10   B   record format (1 = TFRecord, 2 = OFRecord)
    11   B   flags: 1 partial (only a valid prefix is indexed), 2 per-record checksums,
             4 compressed (seek points present), 16 open (the file was being written: the
             bytes after the indexed end are a record not yet whole)
    12   I   header size (512)
    16   Q   record count n
    24   Q   data file size when indexed (bytes on storage: compressed size if compressed)
    32   Q   indexed end: byte just past the last indexed record (in the uncompressed stream
             for a compressed file)
    40   I   CRC32C of the body (everything after the header)
    44   I   CRC32C of the header with this field zeroed
    48   B   compression (0 none, 1 gzip, 2 zlib)
    49   B   content digest scheme: 0 none (written by ofindex 0.2), 1 the
             CRC32C of sampled regions (:mod:`ofindex.storage.identity`)
    50   H   fingerprint length (at most 416)
    52   I   content digest of the data file (0 when the scheme is 0)
    56   Q   seek point count m
    64   Q   bytes of the windows blob
    72   Q   seek point spacing the index was built with (uncompressed bytes; 0 if none)
    80   Q   size of the uncompressed stream (the data file size when not compressed)
    88   Q   version 3: bytes of the packed offsets (padding excluded); version 2: reserved
    96   ... fingerprint (UTF-8, e.g. "mtime_ns:…", "etag:…"), zero padding to 512

The body follows (see :func:`body_layout`): version 2, n uint64 record offsets; version 3,
the packed offsets (:mod:`.packed_offsets`: one zlib stream of the byte-shuffled deltas)
padded with zeros to a multiple of 8 bytes; then with checksums, n uint32 CRC32C of the
payloads (padded to 8 bytes); with compression, m seek points of 32 bytes and the windows
blob. Version 3 is written for compressed data files only (their sidecars are fetched whole,
never by pages); uncompressed ones keep version 2. The version 2 sidecars earlier releases
wrote for compressed files are still read.

Growth segments may follow the body of a version 2 or 3 sidecar whose data file grew
(:mod:`.sidecar_growth`).

Version 1 (0.1) had a variable header: the fields above up to offset 47, the fingerprint
length at 48 and the fingerprint at 50, padded to a multiple of 8, then the offsets. It is
still read.
"""

from __future__ import annotations

import dataclasses
import enum
import struct

import crc32c as _crc32c

from ..errors import SidecarError
from ..storage import FileStamp
from ..storage.stamp import SCHEME
from .framing import RecordFormat

MAGIC = b"OFINDEX\0"
#: The version of uncompressed data files' sidecars: fixed layout, offsets readable by pages.
VERSION = 2
#: The version of compressed data files' sidecars: the offsets packed.
VERSION_PACKED = 3
#: The versions this ofindex reads.
VERSIONS = (1, VERSION, VERSION_PACKED)
HEADER_SIZE = 512
MAX_FINGERPRINT = HEADER_SIZE - 96

FLAG_PARTIAL = 1
FLAG_CHECKSUMS = 2
FLAG_COMPRESSED = 4
#: The data file was being written when indexed: the bytes after the indexed end are a record
#: not yet whole (not damage), which an index of the grown file takes up (see
#: :mod:`.sidecar_growth`).
FLAG_OPEN = 16
_KNOWN_FLAGS = FLAG_PARTIAL | FLAG_CHECKSUMS | FLAG_COMPRESSED | FLAG_OPEN

#: Size of one seek point entry in the body.
SEEK_POINT_SIZE = 32

#: Largest data size a header may state (4 EiB): a larger one is corrupt, and every position
#: below it fits an int64 with room to spare for sums.
MAX_DATA_BYTES = 1 << 62

_V1 = struct.Struct("<8sHBBIQQQIIH")
_V2 = struct.Struct("<8sHBBIQQQIIBBHIQQQQQ")  # the last field: version 3 only
_HEADER_CRC_AT = 44


class Compression(enum.IntEnum):
    """How a data file's bytes are compressed (stored in version 2 and 3 sidecars)."""

    NONE = 0
    GZIP = 1
    ZLIB = 2

    @classmethod
    def parse(cls, value: str | Compression | None) -> Compression:
        """Read ``None``, ``"gzip"``, ``"zlib"`` (any case, ``""`` for none) or a member.

        Raises:
            ValueError: Another name.
        """
        if isinstance(value, Compression):
            return value
        name = "" if value is None else str(value).strip().lower()
        if name in ("", "none"):
            return cls.NONE
        if name in ("gzip", "gz"):
            return cls.GZIP
        if name == "zlib":
            return cls.ZLIB
        raise ValueError(f"unknown compression {value!r}: use 'gzip', 'zlib' or None")


def parse_compression(value: str | Compression | None) -> Compression | None:
    """Read a ``compression=`` argument: ``"auto"`` gives ``None`` (detect), else a member.

    Accepts TensorFlow's spellings (``"GZIP"``, ``"ZLIB"``, ``""``) in any case.

    Raises:
        ValueError: An unknown name.
    """
    if isinstance(value, str) and value.strip().lower() == "auto":
        return None
    return Compression.parse(value)


@dataclasses.dataclass(frozen=True)
class SidecarHeader:
    """A decoded sidecar header.

    Attributes:
        format: The record framing.
        count: Records indexed.
        stamp: The data file's size, fingerprint and content digest when it was indexed.
        indexed_end: Byte just past the last indexed record (uncompressed stream).
        partial: Only a valid prefix of the file is indexed.
        header_size: Bytes before the body.
        body_crc: CRC32C of the body (version 1: of the offsets).
        version: Sidecar format version.
        checksums: The body holds a CRC32C of every payload.
        compression: How the data file is compressed.
        seek_points: Seek points in the body (compressed files).
        windows_bytes: Bytes of the windows blob.
        spacing: Uncompressed bytes between seek points the index was built with.
        uncompressed_size: Size of the decompressed stream.
        packed_bytes: Version 3: bytes of the packed offsets (without padding); else 0.
        open_tail: The data file was being written when indexed: the bytes after the indexed
            end are a record not yet whole, not damage (a complete index otherwise ends at
            the end of the data).
    """

    format: RecordFormat
    count: int
    stamp: FileStamp
    indexed_end: int
    partial: bool = False
    header_size: int = HEADER_SIZE
    body_crc: int = 0
    version: int = VERSION
    checksums: bool = False
    compression: Compression = Compression.NONE
    seek_points: int = 0
    windows_bytes: int = 0
    spacing: int = 0
    uncompressed_size: int = -1
    packed_bytes: int = 0
    open_tail: bool = False

    @property
    def packed(self) -> bool:
        """The offsets are packed (version 3)."""
        return self.version == VERSION_PACKED


@dataclasses.dataclass(frozen=True)
class BodyLayout:
    """Where each section of a sidecar lies, as ``[start, end)`` byte ranges of the file."""

    offsets: tuple[int, int]
    checksums: tuple[int, int]
    seek_points: tuple[int, int]
    windows: tuple[int, int]

    @property
    def end(self) -> int:
        """The size of the whole sidecar."""
        return self.windows[1]


def body_layout(header_size: int, count: int, *, checksums: bool = False,
                seek_points: int = 0, windows_bytes: int = 0,
                packed_bytes: int | None = None) -> BodyLayout:
    """Compute the byte ranges of a sidecar's sections from its counts alone.

    Args:
        header_size: Bytes before the body.
        count: Records indexed.
        checksums: The body holds a CRC32C of every payload.
        seek_points: Seek points in the body.
        windows_bytes: Bytes of the windows blob.
        packed_bytes: Version 3: bytes of the packed offsets (the section is padded to a
            multiple of 8); ``None``: ``count`` plain uint64 offsets.

    Returns:
        The sections; ``offsets`` spans the packed blob and its padding in version 3.
    """
    a = header_size
    b = a + (8 * count if packed_bytes is None else (packed_bytes + 7) // 8 * 8)
    c = b + ((4 * count + 7) // 8 * 8 if checksums else 0)
    d = c + SEEK_POINT_SIZE * seek_points
    return BodyLayout((a, b), (b, c), (c, d), (d, d + windows_bytes))


def layout_of(h: SidecarHeader) -> BodyLayout:
    """The :class:`BodyLayout` a header describes."""
    return body_layout(h.header_size, h.count, checksums=h.checksums,
                       seek_points=h.seek_points, windows_bytes=h.windows_bytes,
                       packed_bytes=h.packed_bytes if h.packed else None)


def encode_header(header: SidecarHeader) -> bytes:
    """Encode a header in its 512 bytes: version 2, or version 3 (packed offsets) as
    ``header.version`` says; ``header_size`` must be :data:`HEADER_SIZE` (version 1 headers
    are read, never written). The header's own CRC is computed here.

    Raises:
        ValueError: The fingerprint is longer than :data:`MAX_FINGERPRINT` bytes, packed
            offsets for a data file that is not compressed, or another version or size.
    """
    if header.version not in (VERSION, VERSION_PACKED) or header.header_size != HEADER_SIZE:
        raise ValueError(f"only version {VERSION} and {VERSION_PACKED} headers of "
                         f"{HEADER_SIZE} bytes are written, not version {header.version} of "
                         f"{header.header_size}")
    if header.packed and header.compression is Compression.NONE:
        raise ValueError("packed offsets (version 3) are for compressed data files only")
    stamp = header.stamp
    fingerprint = stamp.fingerprint.encode("utf-8")
    if len(fingerprint) > MAX_FINGERPRINT:
        raise ValueError(f"fingerprint of {len(fingerprint)} bytes; at most {MAX_FINGERPRINT} fit")
    flags = ((FLAG_PARTIAL if header.partial else 0)
             | (FLAG_CHECKSUMS if header.checksums else 0)
             | (FLAG_COMPRESSED if header.compression is not Compression.NONE else 0)
             | (FLAG_OPEN if header.open_tail else 0))
    size = stamp.size if header.uncompressed_size < 0 else header.uncompressed_size
    scheme, digest = (0, 0) if stamp.content is None else (SCHEME, stamp.content)
    fixed = _V2.pack(
        MAGIC, header.version, int(header.format), flags, HEADER_SIZE, header.count, stamp.size,
        header.indexed_end, header.body_crc, 0, int(header.compression), scheme,
        len(fingerprint), digest, header.seek_points, header.windows_bytes, header.spacing, size,
        header.packed_bytes if header.packed else 0,
    )
    buf = bytearray(fixed + fingerprint + bytes(HEADER_SIZE - len(fixed) - len(fingerprint)))
    struct.pack_into("<I", buf, _HEADER_CRC_AT, _crc32c.crc32c(buf))
    return bytes(buf)


def _corrupt(path: str, why: str) -> SidecarError:
    return SidecarError(f"{path}: sidecar header is corrupt ({why}); rebuild it with "
                        "`ofindex build`")


def decode_header(buf: bytes | memoryview, *, path: str) -> SidecarHeader:
    """Parse and check a sidecar header (``buf`` holds at least the whole header).

    Raises:
        SidecarError: Not a sidecar, an unsupported version, or a corrupt header.
    """
    if len(buf) < _V1.size or bytes(buf[:8]) != MAGIC:
        raise SidecarError(
            f"{path}: not an ofindex sidecar (bad magic); delete it and rebuild the index "
            "with `ofindex build <data file>`"
        )
    version = struct.unpack_from("<H", buf, 8)[0]
    if version not in VERSIONS:
        raise SidecarError(
            f"{path}: sidecar format version {version} is not supported by this ofindex "
            f"(it reads versions {', '.join(map(str, VERSIONS[:-1]))} and {VERSIONS[-1]}); "
            "rebuild with `ofindex build` or upgrade ofindex"
        )
    header_size = struct.unpack_from("<I", buf, 12)[0]
    if (len(buf) < header_size or header_size % 8 or header_size > 1 << 20
            or header_size < _V1.size):  # too small for the fields read below
        raise _corrupt(path, f"header size {header_size}")
    check = bytearray(buf[:header_size])
    stored = struct.unpack_from("<I", check, _HEADER_CRC_AT)[0]
    struct.pack_into("<I", check, _HEADER_CRC_AT, 0)
    if _crc32c.crc32c(check) != stored:
        raise SidecarError(
            f"{path}: sidecar header CRC mismatch (torn or corrupt file); rebuild it with "
            "`ofindex build`"
        )
    return _decode_v1(check, path) if version == 1 else _decode_v2(check, path, version)


def _record_format(code: int, path: str) -> RecordFormat:
    try:
        return RecordFormat(code)
    except ValueError:
        raise SidecarError(f"{path}: unknown record format code {code} in sidecar") from None


def _decode_v1(buf: bytearray, path: str) -> SidecarHeader:
    (_, _, fmt, flags, header_size, count, size, end, ocrc, _, fplen) = _V1.unpack_from(buf)
    if header_size < _V1.size + fplen:
        raise _corrupt(path, "fingerprint length")
    fingerprint = bytes(buf[_V1.size : _V1.size + fplen]).decode("utf-8", "replace")
    return check_consistent(SidecarHeader(
        _record_format(fmt, path), count, FileStamp(size, fingerprint), end,
        bool(flags & FLAG_PARTIAL), header_size, ocrc, version=1, uncompressed_size=size,
    ), path)


def _decode_v2(buf: bytearray, path: str, version: int) -> SidecarHeader:
    """Versions 2 and 3 (one header layout)."""
    if len(buf) != HEADER_SIZE:
        raise _corrupt(path, f"header size {len(buf)}, not {HEADER_SIZE}")
    (_, _, fmt, flags, _, count, size, end, bcrc, _, comp, scheme, fplen, digest, seeks,
     wbytes, spacing, usize, packed) = _V2.unpack_from(buf)
    if flags & ~_KNOWN_FLAGS:
        raise _corrupt(path, f"unknown flags 0x{flags:02x}")
    if fplen > MAX_FINGERPRINT:
        raise _corrupt(path, "fingerprint length")
    try:
        compression = Compression(comp)
    except ValueError:
        raise _corrupt(path, f"unknown compression code {comp}") from None
    if bool(flags & FLAG_COMPRESSED) != (compression is not Compression.NONE):
        raise _corrupt(path, "compression flag and code disagree")
    fingerprint = bytes(buf[96 : 96 + fplen]).decode("utf-8", "replace")
    # a scheme this reader does not know is as none: the fingerprint alone is checked
    stamp = FileStamp(size, fingerprint, content=digest if scheme == SCHEME else None)
    return check_consistent(SidecarHeader(
        _record_format(fmt, path), count, stamp, end,
        bool(flags & FLAG_PARTIAL), HEADER_SIZE, bcrc, version=version,
        checksums=bool(flags & FLAG_CHECKSUMS), compression=compression, seek_points=seeks,
        windows_bytes=wbytes, spacing=spacing, uncompressed_size=usize,
        packed_bytes=packed if version == VERSION_PACKED else 0,
        open_tail=bool(flags & FLAG_OPEN),
    ), path)


#: Deflate's largest expansion: one compressed byte never inflates to more than 1032 bytes
#: (a length-258 match costs at least two bits). Bounds what an index may ask to inflate.
MAX_EXPANSION = 1032


def check_consistent(h: SidecarHeader, path: str) -> SidecarHeader:
    """Refuse a header whose numbers cannot describe a data file (a header CRC recomputed over
    corrupt fields, or a foreign writer): reads trust these to bound every span.

    Args:
        h: The decoded header (or the state a growth segment gives).
        path: The sidecar, for messages.

    Returns:
        ``h``.

    Raises:
        SidecarError: The numbers are impossible.
    """
    compressed = h.compression is not Compression.NONE
    stream = h.uncompressed_size if compressed else h.stamp.size
    for name, value in (("data size", h.stamp.size), ("indexed end", h.indexed_end),
                        ("uncompressed size", stream)):
        if value > MAX_DATA_BYTES:
            raise _corrupt(path, f"{name} {value} is impossible")
    if compressed and stream > MAX_EXPANSION * h.stamp.size:
        raise _corrupt(path, f"uncompressed size {stream} is more than {h.stamp.size} "
                             "compressed bytes can inflate to")
    if h.indexed_end > stream:
        raise _corrupt(path, f"indexed end {h.indexed_end} lies past the end of the data "
                             f"({stream} bytes)")
    if h.partial and h.open_tail:
        raise _corrupt(path, "partial and open at once")
    if not h.partial and not h.open_tail and not compressed and h.indexed_end != h.stamp.size:
        raise _corrupt(path, f"a complete index ends at {h.indexed_end}, not at the end of "
                             f"the data ({h.stamp.size} bytes)")
    if h.count * h.format.overhead > h.indexed_end:
        raise _corrupt(path, f"{h.count} records cannot fit in {h.indexed_end} bytes")
    if (h.seek_points or h.windows_bytes) and not compressed:
        raise _corrupt(path, "seek points for a data file that is not compressed")
    if h.packed and not compressed:
        raise _corrupt(path, "packed offsets for a data file that is not compressed")
    if h.packed_bytes > MAX_DATA_BYTES:
        raise _corrupt(path, f"{h.packed_bytes} bytes of packed offsets is impossible")
    return h
