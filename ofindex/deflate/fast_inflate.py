"""ISA-L's inflate for reads from seek points, when the ``isal`` package is installed.

Intel's ISA-L inflates about twice as fast as zlib on this kind of data (see
``tools/bench_compressed.py``), which is most of the cost of a random read from a compressed
file. Its Python binding (``pip install 'ofindex[isal]'``) cannot start inside a byte, so a
primed point's stream is spliced behind empty deflate blocks that end where the point
begins (:func:`splice`; Python's own zlib uses it too when the compiled module is not
built). It serves the common case only: a span that stays inside one gzip member or zlib
stream and decompresses cleanly, from a point whose data copies from its window (a point
with no window is followed by stored blocks, which zlib copies faster). Anything else (a
member end inside the span, a data error) returns ``None`` and the caller inflates again
with zlib, which names the exact compressed offset of a failure. ``OFINDEX_INFLATE=zlib``
turns it off. The pages of column sidecars and key indexes (whole zlib streams) inflate
through :data:`ISAL` too (``columns.page_codec.inflate_exact``).
"""

from __future__ import annotations

import os
from typing import Any

from ..formats.compression import RAW_WBITS, WBITS
from ..formats.framing import Buffer
from ..formats.seekpoints import SeekKind
from ..formats.sidecar_header import Compression


def _load() -> Any:
    if os.environ.get("OFINDEX_INFLATE", "").lower() == "zlib":
        return None
    try:
        from isal import isal_zlib
    except ImportError:
        return None
    return isal_zlib


#: ``isal.isal_zlib``, or ``None`` (not installed, or turned off).
ISAL: Any = _load()


def _load_igzip() -> Any:
    if ISAL is None:
        return None
    from isal import igzip_lib  # (the same package as isal_zlib)

    return igzip_lib


#: ``isal.igzip_lib`` (ISA-L's raw deflate, for whole pages), or ``None`` as :data:`ISAL`.
IGZIP: Any = _load_igzip()


def _bits(value: int, n: int) -> list[int]:
    """``value`` as ``n`` bits, lowest first (the order deflate packs them)."""
    return [(value >> i) & 1 for i in range(n)]


#: An empty fixed-Huffman block (not the last): 10 bits that produce nothing.
_EMPTY_FIXED = _bits(0, 1) + _bits(1, 2) + _bits(0, 7)
#: An empty dynamic-Huffman block of 93 bits (an odd length, which no fixed block has): 257
#: literal/length codes of which only end-of-block has a (1-bit) code, one 1-bit distance code,
#: the code lengths sent with a code-length code of two 1-bit symbols (1 and 18).
_EMPTY_DYNAMIC = (
    _bits(0, 1) + _bits(2, 2) + _bits(0, 5) + _bits(0, 5) + _bits(15, 4)
    + [b for sym in (16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15)
       for b in _bits(1 if sym in (1, 18) else 0, 3)]
    + [1, *_bits(138 - 11, 7), 1, *_bits(118 - 11, 7)]  # 256 zero lengths
    + [0, 0]  # end-of-block: length 1; the distance code: length 1
    + [0]  # the end of this block
)


def _lead_in(t: int) -> tuple[bytes, int]:
    """Empty deflate blocks of ``8 q + t`` bits (``0 < t < 8``): the ``q`` whole bytes, and
    the last ``t`` bits as the low bits of one more byte."""
    if t % 2 == 0:
        blocks = _EMPTY_FIXED * (t // 2)
    else:
        blocks = _EMPTY_DYNAMIC + _EMPTY_FIXED * (((t - 5) % 8) // 2)
    q = len(blocks) // 8
    assert len(blocks) % 8 == t
    whole = bytes(sum(blocks[8 * i + j] << j for j in range(8)) for i in range(q))
    return whole, sum(blocks[8 * q + j] << j for j in range(t))


#: For a point whose block starts ``bits`` bits before the end of a byte: its lead-in.
_LEAD_INS = {bits: _lead_in(8 - bits) for bits in range(1, 8)}


def splice(src: Buffer, bits: int) -> bytes:
    """A raw deflate stream that any inflater can start at its first byte, equivalent to
    starting ``src`` at its first byte's top ``bits`` bits (what zlib's ``inflatePrime``
    does): the low ``8 - bits`` bits of that byte are replaced by the end of empty deflate
    blocks that produce nothing, and the bytes before it by their start. The rest keeps its
    alignment to bytes, which stored blocks depend on (shifting the bits would break them).

    Args:
        src: The compressed bytes from the byte that holds the point on.
        bits: The bits of ``src[0]`` that belong to the block at the point (1..7).

    Returns:
        The stream: ``src`` with at most 12 bytes more in front.
    """
    head, rest = splice_parts(src, bits)
    return head + bytes(rest)


def splice_parts(src: Buffer, bits: int) -> tuple[bytes, memoryview]:
    """:func:`splice` as two pieces to feed one after the other, without copying ``src``:
    the lead-in with the point's byte, and a view of the bytes after it."""
    whole, last = _LEAD_INS[bits]
    first = (src[0] & ~((1 << (8 - bits)) - 1) & 0xFF) | last
    return whole + bytes((first,)), memoryview(src)[1:]


def lead_in_bytes(bits: int) -> int:
    """How many bytes :func:`splice` puts before the byte after the point's byte."""
    return len(_LEAD_INS[bits][0]) + 1


def fast_raw(src: Buffer, bits: int, window: bytes, most: int) -> bytes | None:
    """Up to ``most`` bytes of a raw deflate stream inflated with ISA-L (fewer where it ends),
    or ``None`` when ISA-L is not in use or refuses the data.

    Args:
        src: The compressed bytes (from the byte before the stream's first bit when ``bits``).
        bits: The bits of ``src[0]`` that belong to the stream (0: it starts on a byte).
        window: The output before the stream (may be empty).
        most: The most bytes to produce.
    """
    isal = ISAL
    if isal is None or not len(src):
        return None
    d = isal.decompressobj(RAW_WBITS, zdict=window) if window else isal.decompressobj(RAW_WBITS)
    return _inflate_with(isal, d, src, bits, most)


def _inflate_with(isal: Any, d: Any, src: Buffer, bits: int, most: int) -> bytes | None:
    """Up to ``most`` bytes out of decompressor ``d`` fed ``src`` (spliced when ``bits``),
    or ``None`` when ISA-L refuses the data."""
    try:
        if not bits:
            out: bytes = d.decompress(src, most)
            return out
        head, rest = splice_parts(src, bits)
        first: bytes = d.decompress(head, most)
        if len(first) >= most or d.eof:
            return first
        more: bytes = d.decompress(rest, most - len(first))
        return first + more if first else more
    except isal.error:
        return None


def fast_inflate(src: Buffer, kind: int, bits: int, window: bytes, compression: Compression,
                 want: int) -> bytes | None:
    """``want`` bytes inflated from a seek point with ISA-L, or ``None`` when it cannot
    serve the span (see the module docstring).

    Args:
        src: The compressed bytes from the point on (from the byte before it when ``bits``).
        kind: The point's :class:`~ofindex.formats.seekpoints.SeekKind`.
        bits: For a primed point, the bits of ``src[0]`` that belong to its block.
        window: For a primed point, the output before it.
        compression: The file's compression.
        want: Uncompressed bytes to produce.

    Returns:
        Exactly ``want`` bytes, or ``None``.
    """
    isal = ISAL
    if isal is None or want <= 0 or not len(src):
        return None
    if kind == SeekKind.PRIMED:
        if not window:  # nothing after the point copies: stored blocks, which zlib copies
            return None  # faster (measured: 16,000 vs 11,000 ds[i]/s on ~100 KB JPEG-like)
        d = isal.decompressobj(RAW_WBITS, zdict=window)
    elif kind == SeekKind.ALIGNED:
        d, bits = isal.decompressobj(RAW_WBITS), 0
    else:
        d, bits = isal.decompressobj(WBITS[compression]), 0
    out = _inflate_with(isal, d, src, bits, want)
    return out if out is not None and len(out) == want else None
