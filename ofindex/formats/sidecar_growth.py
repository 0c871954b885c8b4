"""Growth segments: a sidecar grows with its data file by bytes appended after its body.

A data file that grew (a file still being written, more records appended) is indexed again
from where its index ends (:mod:`ofindex.index.growth`); what that adds goes into a *growth
segment* written after the sidecar's last byte, so that nothing a reader may hold (the header,
the body, a memory map of them) is ever rewritten::

    [header 512][body][pad to 8][segment 1][segment 2]...

A segment is a header of 96 bytes plus the data file's fingerprint (padded to a multiple of 8)
and a body: the offsets of the records it adds (plain, or packed like a version 3 body), their
checksums when the sidecar has them, the seek points it adds and their windows, padded to a
multiple of 8. Its header states the whole index as of that segment: record count, the data
file's stamp, indexed end, uncompressed size, and the *chained* body CRC, the CRC32C of the
sidecar's body followed by the bodies of every segment up to this one (so the last segment's
names the grown sidecar's version as a body CRC names a sidecar's, and each segment's body is
checked in time proportional to its size). The index as of any segment is a valid index of
the data file as it was then: a reader that expects an earlier state (a manifest written
before the growth) stops at the segment that states it (:func:`state_at`).

Appends are atomic for readers: a segment that runs past the end of the file is one still
being written (or whose writer died) and is ignored, with anything after it; a whole one must
check out, or the sidecar is refused. docs/format.md specifies the layout.
"""

from __future__ import annotations

import dataclasses
import struct

import crc32c as _crc32c
import numpy as np

from ..errors import SidecarError
from ..storage import FileStamp
from ..storage.stamp import SCHEME
from .framing import Buffer
from .packed_offsets import pack_offsets, unpack_offsets
from .seekpoints import SEEK_DTYPE, table_from_bytes
from .sidecar_header import (
    FLAG_OPEN,
    MAX_DATA_BYTES,
    MAX_FINGERPRINT,
    SEEK_POINT_SIZE,
    SidecarHeader,
    check_consistent,
)

#: The first bytes of every growth segment.
MAGIC = b"OFIXGROW"
#: The fixed part of a segment header (the fingerprint follows it).
_FIXED = struct.Struct("<8sIIQQQIIQQQQIBBH8x")
FIXED_BYTES = _FIXED.size
assert FIXED_BYTES == 96
_CRC_AT = 12
#: Flags a segment may set (the others are refused): the data file was still being written.
_SEGMENT_FLAGS = FLAG_OPEN


def align8(n: int) -> int:
    """``n`` rounded up to a multiple of 8."""
    return (n + 7) // 8 * 8


@dataclasses.dataclass(frozen=True)
class Growth:
    """What a data file's growth adds to its index (one segment's content).

    Attributes:
        header: The index as of this growth: cumulative record count, the data file's stamp
            (with its content digest), indexed end, uncompressed size, whether the file was
            still being written (``open_tail``); its ``body_crc``, ``seek_points`` and
            ``windows_bytes`` are the grown sidecar's (chained CRC, totals).
        offsets: ``uint64`` offsets of the records added.
        checksums: ``uint32`` payload CRC32Cs of the records added (when the sidecar keeps
            them), or ``None``.
        seek_points: The seek points added (their ``window_at`` in :attr:`windows`).
        windows: Their windows blob.
    """

    header: SidecarHeader
    offsets: np.ndarray
    checksums: np.ndarray | None
    seek_points: np.ndarray
    windows: bytes

    @property
    def added(self) -> int:
        """Records this growth adds."""
        return len(self.offsets)


@dataclasses.dataclass(frozen=True)
class Segment:
    """A growth segment found in a sidecar: where its sections lie and the state it states.

    Attributes:
        at: Where its header starts in the sidecar.
        end: Where it ends (its padded body included).
        header: The index as of this segment (see :attr:`Growth.header`).
        first: The number of its first record.
        offsets: Byte range of its offsets (packed blob without padding for version 3).
        checksums: Byte range of its checksums (empty when none).
        seek_points: Byte range of its seek points.
        windows: Byte range of its windows blob.
        body: Byte range of its body (what its chained CRC covers).
    """

    at: int
    end: int
    header: SidecarHeader
    first: int
    offsets: tuple[int, int]
    checksums: tuple[int, int]
    seek_points: tuple[int, int]
    windows: tuple[int, int]
    body: tuple[int, int]

    @property
    def added(self) -> int:
        """Records this segment adds."""
        return self.header.count - self.first


def encode_segment(base: SidecarHeader, previous: SidecarHeader,
                   growth: Growth) -> tuple[bytes, int]:
    """The bytes of the segment that records ``growth`` after a sidecar whose state is
    ``previous`` (its base header ``base``, which fixes the layout: plain or packed offsets,
    checksums or not).

    Args:
        base: The sidecar's own header (the first 512 bytes).
        previous: The sidecar's state before this growth (``base`` or its last segment's).
        growth: What is added; its header's cumulative fields are taken as given, its body
            CRC is computed here.

    Returns:
        The segment (header and body, padded to a multiple of 8: append it at the sidecar's
        end padded to a multiple of 8, :func:`segments_start`), and its chained body CRC (the
        grown sidecar's body CRC).

    Raises:
        ValueError: ``growth`` does not continue ``previous`` (fewer records, a smaller file,
            checksums missing or unexpected), or its fingerprint does not fit.
    """
    h = growth.header
    n = growth.added
    if h.count != previous.count + n or h.stamp.size < previous.stamp.size:
        raise ValueError(f"a growth of {n} records from {previous.count} cannot state "
                         f"{h.count} records in {h.stamp.size} bytes")
    if (growth.checksums is not None) != base.checksums or (
            growth.checksums is not None and len(growth.checksums) != n):
        raise ValueError("a growth's checksums must match its sidecar's (one per record)")
    parts: list[bytes] = []
    packed = 0
    if base.packed:
        blob = pack_offsets(growth.offsets)
        packed = len(blob)
        parts.append(blob + bytes(align8(packed) - packed))
    else:
        parts.append(np.ascontiguousarray(growth.offsets, dtype="<u8").tobytes())
    if growth.checksums is not None:
        raw = np.ascontiguousarray(growth.checksums, dtype="<u4").tobytes()
        parts.append(raw + bytes(align8(len(raw)) - len(raw)))
    points = np.ascontiguousarray(growth.seek_points, dtype=SEEK_DTYPE)
    parts += [points.tobytes(), bytes(growth.windows)]
    raw_body = b"".join(parts)
    body = raw_body + bytes(align8(len(raw_body)) - len(raw_body))
    fingerprint = h.stamp.fingerprint.encode("utf-8")
    if len(fingerprint) > MAX_FINGERPRINT:
        raise ValueError(f"fingerprint of {len(fingerprint)} bytes; at most {MAX_FINGERPRINT} fit")
    size = align8(FIXED_BYTES + len(fingerprint))
    scheme, digest = (0, 0) if h.stamp.content is None else (SCHEME, h.stamp.content)
    head = bytearray(size)
    chained = _crc32c.crc32c(body, previous.body_crc)
    _FIXED.pack_into(
        head, 0, MAGIC, size, 0, h.count, h.stamp.size, h.indexed_end,
        chained, digest, h.uncompressed_size, len(body),
        len(growth.windows), packed, len(points), FLAG_OPEN if h.open_tail else 0, scheme,
        len(fingerprint))
    head[FIXED_BYTES : FIXED_BYTES + len(fingerprint)] = fingerprint
    struct.pack_into("<I", head, _CRC_AT, _crc32c.crc32c(head))
    return bytes(head) + body, chained


def restamp_segment(raw: bytes, segment: Segment, stamp: FileStamp) -> bytes:
    """A sidecar whose last segment ``segment`` states the data file's stamp ``stamp``
    instead (the same records found in a copy of the file: see
    :func:`ofindex.formats.sidecar.restamped`); its body and chained CRC are kept.

    Args:
        raw: The whole sidecar (its last whole segment is ``segment``).
        segment: Its last segment.
        stamp: The stamp to state, with its content digest.

    Returns:
        The sidecar's new bytes (whatever followed ``segment`` dropped).

    Raises:
        ValueError: The fingerprint does not fit.
    """
    fingerprint = stamp.fingerprint.encode("utf-8")
    if len(fingerprint) > MAX_FINGERPRINT:
        raise ValueError(f"fingerprint of {len(fingerprint)} bytes; at most {MAX_FINGERPRINT} fit")
    fields = list(_FIXED.unpack_from(raw, segment.at))
    size = align8(FIXED_BYTES + len(fingerprint))
    scheme, digest = (0, 0) if stamp.content is None else (SCHEME, stamp.content)
    fields[1], fields[2], fields[4], fields[7] = size, 0, stamp.size, digest
    fields[14], fields[15] = scheme, len(fingerprint)
    head = bytearray(size)
    _FIXED.pack_into(head, 0, *fields)
    head[FIXED_BYTES : FIXED_BYTES + len(fingerprint)] = fingerprint
    struct.pack_into("<I", head, _CRC_AT, _crc32c.crc32c(head))
    a, b = segment.body
    return bytes(raw[: segment.at]) + bytes(head) + bytes(raw[a:b])


def segments_start(body_end: int) -> int:
    """Where a sidecar's first segment starts: its body's end rounded up to 8 bytes."""
    return align8(body_end)


def _corrupt(path: str, at: int, why: str) -> SidecarError:
    return SidecarError(f"{path}: the growth segment at byte {at} is corrupt ({why}); rebuild "
                        "the index with `ofindex build --force`")


def parse_segments(buf: Buffer, body_end: int, base: SidecarHeader, *,
                   path: str, origin: int = 0) -> list[Segment]:
    """The whole growth segments of a sidecar, in order, their headers checked (their bodies
    are checked by :func:`check_segment_body` when their records are first used).

    Args:
        buf: The sidecar's bytes from byte ``origin`` on (all of them by default).
        body_end: Where its base body ends (the header's layout), at or after ``origin``.
        base: Its header.
        path: The sidecar, for messages.
        origin: Where ``buf`` starts in the sidecar (the positions of the segments returned
            are the sidecar's; their sections lie in ``buf`` only when ``origin`` is 0).

    Returns:
        The segments; a segment that runs past the end of ``buf`` (being appended, or left
        by a writer that died) is not one, nor is anything after it.

    Raises:
        SidecarError: Bytes after the body that are not a growth segment (nor zeros), a
            segment whose header fails its CRC or whose numbers do not continue the index, or
            a version 1 sidecar followed by bytes.
    """
    view = _Shifted(buf, origin)
    size = view.size
    found: list[Segment] = []
    at = segments_start(body_end)
    if any(view.get(body_end, min(at, size))):
        raise _corrupt(path, body_end, "the padding after the body is not zero")
    previous = base
    while at < size:
        if not MAGIC.startswith(view.get(at, min(at + 8, size))[:8]):
            raise SidecarError(f"{path}: {size - at} bytes after the index at byte {at} are "
                               "not a growth segment; it is corrupt — rebuild the index with "
                               "`ofindex build --force`")
        if size - at < FIXED_BYTES:
            break  # a header still being written
        if base.version == 1:
            raise _corrupt(path, at, "a version 1 sidecar cannot grow")
        segment = _segment_at(view, at, base, previous, path)
        if segment is None:
            break  # being appended
        found.append(segment)
        previous = segment.header
        at = segment.end
    return found


class _Shifted:
    """Bytes of a file from ``origin`` on, addressed by their positions in the file."""

    def __init__(self, buf: Buffer, origin: int) -> None:
        self.buf, self.origin = buf, origin
        self.size = origin + len(buf)

    def get(self, a: int, b: int) -> bytes:
        return bytes(self.buf[a - self.origin : b - self.origin])

    def unpack(self, fmt: struct.Struct, at: int) -> tuple[int, ...]:
        fields: tuple[int, ...] = fmt.unpack_from(self.buf, at - self.origin)
        return fields


def _segment_at(view: _Shifted, at: int, base: SidecarHeader,
                previous: SidecarHeader, path: str) -> Segment | None:
    """The segment whose header starts at ``at``, or ``None`` when it runs past the bytes."""
    (_, hsize, stored, count, dsize, end, bcrc, digest, usize, body_bytes, wbytes, packed,
     points, flags, scheme, fplen) = view.unpack(_FIXED, at)
    if hsize > view.size - at:
        return None
    if hsize < FIXED_BYTES or hsize % 8 or fplen > MAX_FINGERPRINT or (
            align8(FIXED_BYTES + fplen) != hsize):
        raise _corrupt(path, at, f"header size {hsize} for a fingerprint of {fplen} bytes")
    check = bytearray(view.get(at, at + hsize))
    struct.pack_into("<I", check, _CRC_AT, 0)
    if _crc32c.crc32c(check) != stored:
        raise _corrupt(path, at, "its header fails its CRC")
    if body_bytes > view.size - at - hsize:
        return None
    if flags & ~_SEGMENT_FLAGS or any(check[FIXED_BYTES + fplen:]):
        raise _corrupt(path, at, f"unknown flags 0x{flags:02x} or bytes after the fingerprint")
    if count < previous.count or dsize < previous.stamp.size or end < previous.indexed_end:
        raise _corrupt(path, at, f"{count} records in {dsize} bytes do not continue the "
                                 f"{previous.count} in {previous.stamp.size} before it")
    if count - previous.count > MAX_DATA_BYTES // base.format.overhead:
        raise _corrupt(path, at, f"{count} records is impossible")
    fingerprint = bytes(check[FIXED_BYTES : FIXED_BYTES + fplen]).decode("utf-8", "replace")
    stamp = FileStamp(dsize, fingerprint, content=digest if scheme == SCHEME else None)
    header = check_consistent(dataclasses.replace(
        base, count=count, stamp=stamp, indexed_end=end, body_crc=bcrc,
        uncompressed_size=usize, seek_points=previous.seek_points + points,
        windows_bytes=previous.windows_bytes + wbytes, open_tail=bool(flags & FLAG_OPEN)),
        path)
    added = count - previous.count
    sections = _sections(at + hsize, added, base, packed, points, wbytes)
    if sections[-1] > at + hsize + body_bytes or align8(sections[-1]) != at + hsize + body_bytes:
        raise _corrupt(path, at, f"a body of {body_bytes} bytes cannot hold what it states")
    o, c, s, w = sections[0], sections[1], sections[2], sections[3]
    offsets_end = o + (packed if base.packed else 8 * added)
    return Segment(at, at + hsize + body_bytes, header, previous.count, (o, offsets_end),
                   (c, c + (4 * added if base.checksums else 0)), (s, w),
                   (w, w + wbytes), (at + hsize, at + hsize + body_bytes))


def _sections(start: int, added: int, base: SidecarHeader, packed: int, points: int,
              wbytes: int) -> tuple[int, int, int, int, int]:
    """Where a segment body's sections start (offsets, checksums, seek points, windows) and
    where its last one ends."""
    o = start
    c = o + (align8(packed) if base.packed else 8 * added)
    s = c + (align8(4 * added) if base.checksums else 0)
    w = s + SEEK_POINT_SIZE * points
    return o, c, s, w, w + wbytes


def check_segment_body(buf: Buffer, segment: Segment, previous_crc: int, *,
                       path: str) -> None:
    """Check a segment's body against its chained CRC.

    Args:
        buf: The whole sidecar.
        segment: The segment.
        previous_crc: The chained body CRC before it (the sidecar's body CRC, or the previous
            segment's).
        path: The sidecar, for messages.

    Raises:
        SidecarError: The body fails its CRC.
    """
    a, b = segment.body
    body = memoryview(buf)[a:b]
    try:
        crc = _crc32c.crc32c(body, previous_crc)
    finally:
        body.release()
    if crc != segment.header.body_crc:
        raise _corrupt(path, segment.at, f"its body fails its CRC (stored "
                       f"0x{segment.header.body_crc:08x}, computed 0x{crc:08x})")


def segment_offsets(buf: Buffer, segment: Segment, base: SidecarHeader,
                    previous_end: int, *, path: str) -> np.ndarray:
    """The offsets a segment adds, checked: they start at the previous indexed end (records
    follow each other) and do not pass the segment's indexed end.

    Raises:
        SidecarError: They do not (or the packed blob is corrupt).
    """
    a, b = segment.offsets
    n = segment.added
    if base.packed:
        offsets = unpack_offsets(memoryview(buf)[a:b], n, segment.header.indexed_end,
                                 path=path)
    else:
        offsets = np.frombuffer(buf, dtype="<u8", count=n, offset=a)
    if n and int(offsets[0]) != previous_end:
        raise _corrupt(path, segment.at, f"its first record starts at {int(offsets[0])}, not "
                                         f"where the index before it ends ({previous_end})")
    return offsets


def segment_points(buf: Buffer, segment: Segment) -> np.ndarray:
    """A read-only view of the seek points a segment adds (window offsets in its own blob)."""
    a, b = segment.seek_points
    return table_from_bytes(memoryview(buf)[a:b], (b - a) // SEEK_POINT_SIZE)
