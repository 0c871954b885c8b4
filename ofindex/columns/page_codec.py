"""The pieces pages of columns and key indexes are made of (see docs/format.md, "Column
sidecar" and "Key index"): byte planes, deflated pages, validity bitmaps and bytes values.

* *Byte planes*: an array of ``k`` values of ``w`` bytes (little-endian) written as ``w``
  planes of ``k`` bytes, the lowest byte of every value first (as the packed offsets of
  sidecar version 3): runs of equal high bytes compress to almost nothing.
* A *deflated* page is one zlib stream (RFC 1950) inflating to exactly the page's raw size;
  a reader never inflates more than that (a page that says otherwise is refused).
* A *validity bitmap* of ``k`` records has bit ``i % 8`` of byte ``i // 8`` set when record
  ``i`` holds a value (Arrow's order), padded with zero bits to a multiple of 8 bytes.
* *Bytes values*: ``k`` uint32 lengths, then the values back to back.
"""

from __future__ import annotations

import sys
import zlib
from typing import Any

import numpy as np

from ..decode._plans import loops
from ..deflate import fast_inflate
from ..errors import SidecarError
from .packed import PackedBytes

#: Level of pages: zlib's level 1 is about 3 times faster to write than level 6 and, on the
#: columns measured (labels, sorted ids, scores), within 10 % of its size. ISA-L's level 1,
#: used where it is installed, writes the same kind of zlib stream 3-7 times faster still and
#: no larger (16,384-record pages: shuffled 13-byte ids 1,317 -> 403 us, 72.1 -> 68.9 KB;
#: sorted ids 1,662 -> 343 us; one-byte labels 107 -> 47 us; a key index's record planes
#: 546 -> 73 us, 23.2 -> 24.2 KB).
LEVEL = 1
#: A page is stored deflated only when that saves at least an eighth of it.
_WORTH = 8
#: Compression codes.
STORED, DEFLATED = 0, 1


def to_planes(values: np.ndarray) -> bytes:
    """``values`` (a 1-d fixed-width numeric array) as byte planes."""
    width = values.dtype.itemsize
    raw = np.ascontiguousarray(values.astype(values.dtype.newbyteorder("<"), copy=False))
    return np.ascontiguousarray(raw.view(np.uint8).reshape(-1, width).T).tobytes()


def from_planes(raw: bytes | memoryview, count: int, dtype: np.dtype[Any]) -> np.ndarray:
    """The ``count`` values of ``dtype`` whose byte planes are ``raw`` (exactly that long)."""
    width = dtype.itemsize
    planes = np.frombuffer(raw, dtype=np.uint8, count=count * width).reshape(width, count)
    # a plane at a time into its byte of every value: 2-5 times faster than numpy's copy of
    # the transposed planes (8-byte values of a 4,096-record page: 15 us against 25 us;
    # of 16,384 records: 47 us against 90 us), which walks the planes across
    interleaved = np.empty((count, width), dtype=np.uint8)
    for byte in range(width):
        interleaved[:, byte] = planes[byte]
    values: np.ndarray = interleaved.view(dtype.newbyteorder("<"))
    return values.reshape(count)


def deltas_into(raw: bytes | memoryview, count: int, out: np.ndarray, at: int,
                limit: int) -> bool:
    """The ``count`` int64 deltas whose byte planes end ``raw``, summed (from 0, wrapping as
    int64 sums do) into ``out[at:at + count]``: a key index leaf's records (compiled:
    csrc/keyrecords.c's ``key_records``, ~3 us a leaf of 4,096 records where numpy's copies
    and sums took ~25 us).

    Args:
        raw: The page; its last ``8 * count`` bytes are the planes.
        count: The deltas.
        out: A writable int64 array.
        at: Where in ``out`` the sums go.
        limit: The records' bound.

    Returns:
        Whether every sum is in ``[0, limit)``.
    """
    native = loops()
    if native is not None:
        inside: bool = native.key_records(raw, count, out, at, limit)
        return inside
    return _deltas_into(raw, count, out, at, limit)


#: The byte of an int64 in memory that holds its bits ``8 * b`` and up, for ``b`` in 0..7.
_BYTE_AT = list(range(8)) if sys.byteorder == "little" else list(range(7, -1, -1))


def _deltas_into(raw: bytes | memoryview, count: int, out: np.ndarray, at: int,
                 limit: int) -> bool:
    """:func:`deltas_into` with numpy (the compiled call's pure-Python twin)."""
    planes = np.frombuffer(raw, dtype=np.uint8, count=8 * count,
                           offset=len(raw) - 8 * count).reshape(8, count)
    sums = out[at:at + count]
    interleaved = sums.view(np.uint8).reshape(count, 8)
    interleaved[:] = 0
    for byte in range(8):  # planes of zeros skipped (small deltas: most of them)
        plane = planes[byte]
        if plane.any():
            interleaved[:, _BYTE_AT[byte]] = plane
    np.cumsum(sums, out=sums)
    return not count or (int(sums.min()) >= 0 and int(sums.max()) < limit)


def deflate(raw: bytes) -> tuple[bytes, int]:
    """A page as stored: deflated when that pays, else as it is.

    Returns:
        ``(stored bytes, compression code)``.
    """
    isal = fast_inflate.ISAL  # ISA-L where installed (OFINDEX_INFLATE=zlib turns it off)
    packed = isal.compress(raw, LEVEL) if isal is not None else zlib.compress(raw, LEVEL)
    if len(packed) <= len(raw) - len(raw) // _WORTH:
        return packed, DEFLATED
    return raw, STORED


def inflate_exact(stored: bytes | memoryview, compression: int, size: int, where: str) -> bytes:
    """A page's raw bytes: ``stored`` inflated (never more than ``size`` bytes) or as is.

    A deflated page's zlib header is checked here and its deflate data inflated raw, ending
    exactly before the 4-byte Adler-32, which is not computed: the page's CRC32C, checked by
    every caller first, covers the whole stream (ISA-L's Adler-32 of a key index's 64 KiB
    leaves took a fifth of their inflate).

    Args:
        stored: The page as stored, its CRC32C checked.
        compression: Its compression code.
        size: The raw size the page must have.
        where: The file and page, for messages.

    Returns:
        Exactly ``size`` bytes.

    Raises:
        SidecarError: An unknown compression, a damaged zlib stream, or another raw size.
    """
    if compression == STORED:
        if len(stored) != size:
            raise SidecarError(f"{where}: {len(stored)} bytes where {size} are expected; "
                               "rebuild it with `ofindex build`")
        return bytes(stored)
    if compression != DEFLATED:
        raise SidecarError(f"{where}: unknown page compression {compression}; rebuild it "
                           "with `ofindex build`")
    if len(stored) < 6 or not _zlib_header(stored[0], stored[1]):
        raise _not_zlib(where, "no zlib header")
    raw, ended = _inflate_raw(memoryview(stored)[2:-4], size + 1, where)
    if len(raw) != size or not ended:
        raise SidecarError(f"{where}: the page does not inflate to exactly {size} bytes; "
                           "rebuild it with `ofindex build`")
    return raw


def _not_zlib(where: str, why: object) -> SidecarError:
    return SidecarError(f"{where}: the page is not a zlib stream ({why}); rebuild it with "
                        "`ofindex build`")


def _inflate_raw(body: memoryview, limit: int, where: str) -> tuple[bytes, bool]:
    """Raw deflate data inflated (at most ``limit`` bytes) through ISA-L where it is
    installed (fast_inflate.ISAL, the reads' choice: the 209 leaves of a where(label=3) over
    10 M records inflate in 4.5 ms of CPU where zlib takes 9.1), else zlib.

    Returns:
        The bytes, and whether the deflate data ended exactly at the end of ``body``.
    """
    igzip = fast_inflate.IGZIP
    if fast_inflate.ISAL is not None and igzip is not None:
        fast = igzip.IgzipDecompressor(igzip.DECOMP_DEFLATE)
        try:
            raw: bytes = fast.decompress(body, limit)
        except igzip.IsalError as exc:
            raise _not_zlib(where, exc) from None
        return raw, fast.eof and not fast.unused_data
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    try:
        raw = inflater.decompress(body, limit)
    except zlib.error as exc:
        raise _not_zlib(where, exc) from None
    return raw, inflater.eof and not inflater.unused_data and not inflater.unconsumed_tail


def _zlib_header(method: int, flags: int) -> bool:
    """Whether two bytes are a zlib stream's header (RFC 1950) without a preset dictionary:
    deflate with a window of at most 32 KiB, the check bits right."""
    return method & 0x0F == 8 and method >> 4 <= 7 and not flags & 0x20 and \
        (method << 8 | flags) % 31 == 0


def bitmap_bytes(count: int) -> int:
    """Bytes of the validity bitmap of ``count`` records (a multiple of 8)."""
    return -(-count // 64) * 8


def pack_bitmap(valid: np.ndarray) -> bytes:
    """The validity bitmap of a boolean array."""
    bits = np.packbits(valid.astype(bool), bitorder="little").tobytes()
    return bits + bytes(bitmap_bytes(len(valid)) - len(bits))


def unpack_bitmap(raw: bytes | memoryview, count: int) -> np.ndarray:
    """The boolean array of a validity bitmap of ``count`` records."""
    bits = np.frombuffer(raw, dtype=np.uint8, count=-(-count // 8))
    return np.unpackbits(bits, count=count, bitorder="little").astype(bool)


def pack_bytes_values(values: PackedBytes) -> bytes:
    """Bytes values as their uint32 lengths and data.

    Raises:
        ValueError: A value is 4 GiB or more.
    """
    lengths = values.lengths
    if len(lengths) and int(lengths.max()) >= 1 << 32:
        raise ValueError("a bytes value of 4 GiB or more cannot be a column value")
    data = values.data[int(values.offsets[0]):int(values.offsets[-1])]
    return lengths.astype("<u4").tobytes() + data.tobytes()


def unpack_bytes_values(raw: bytes | memoryview, count: int, where: str) -> PackedBytes:
    """The ``count`` bytes values of ``raw`` (exactly lengths and data).

    Raises:
        SidecarError: The lengths do not add up to the data that follows them.
    """
    head = 4 * count
    if len(raw) < head:
        raise SidecarError(f"{where}: {len(raw)} bytes cannot hold {count} value lengths; "
                           "rebuild it with `ofindex build`")
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(np.frombuffer(raw, dtype="<u4", count=count), out=offsets[1:])
    if head + int(offsets[-1]) != len(raw):
        raise SidecarError(f"{where}: the value lengths do not add up to the page's size; "
                           "rebuild it with `ofindex build`")
    return PackedBytes(np.frombuffer(raw, dtype=np.uint8, offset=head), offsets)
