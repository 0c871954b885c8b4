"""Compressed data files: which compression a file uses, from its first bytes.

TensorFlow writes TFRecords as GZIP (RFC 1952, magic ``1f 8b``, possibly several members) or
ZLIB (RFC 1950: a 2-byte header whose CMF/FLG pair is a multiple of 31 and names deflate)
streams of the framed records. A header alone can also be the start of an uncompressed
record (the low bytes of its length), so a candidate is confirmed by inflating the first
bytes and checking that they decompress cleanly.
"""

from __future__ import annotations

import zlib

from .sidecar_header import Compression

GZIP_MAGIC = b"\x1f\x8b"

#: ``wbits`` of zlib's inflate/deflate for each container (raw deflate is -15).
WBITS = {Compression.GZIP: 31, Compression.ZLIB: 15}
RAW_WBITS = -15
#: Bytes after the end of a deflate stream: gzip CRC32 + ISIZE, zlib Adler-32.
TRAILER_BYTES = {Compression.GZIP: 8, Compression.ZLIB: 4}


def looks_gzip(head: bytes | memoryview) -> bool:
    """Whether ``head`` starts like a gzip member: magic, method 8 (deflate), no reserved
    flag bits."""
    return (len(head) >= 10 and bytes(head[:3]) == GZIP_MAGIC + b"\x08"
            and not head[3] & 0xE0)


def looks_zlib(head: bytes | memoryview) -> bool:
    """Whether ``head`` starts with a valid zlib header: deflate, window at most 32 KiB, a
    check value that makes CMF*256+FLG a multiple of 31, and no preset dictionary."""
    if len(head) < 2:
        return False
    cmf, flg = head[0], head[1]
    return (cmf & 0x0F == 8 and cmf >> 4 <= 7 and (cmf << 8 | flg) % 31 == 0
            and not flg & 0x20)


def starts_stream(head: bytes | memoryview, compression: Compression) -> bool:
    """Whether ``head`` starts a stream of ``compression`` (gzip member or zlib header)."""
    if compression is Compression.GZIP:
        return looks_gzip(head)
    return looks_zlib(head)


def inflate_head(head: bytes | memoryview, compression: Compression,
                 limit: int = 64) -> tuple[bytes, bool] | None:
    """Decompress the start of a stream.

    Args:
        head: The first bytes of a file.
        compression: GZIP or ZLIB.
        limit: Most bytes of output wanted.

    Returns:
        ``(output, whether the stream ended)``, or ``None`` when ``head`` is not valid
        ``compression`` data.
    """
    d = zlib.decompressobj(WBITS[compression])
    try:
        out = d.decompress(bytes(head), limit)
    except zlib.error:
        return None
    return out, d.eof
