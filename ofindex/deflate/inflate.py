"""Inflating gzip/zlib data from a seek point: zlib through the compiled ``Inflater``
(``csrc/inflate.c``), or Python's own zlib module when it is not built.

Python's zlib cannot start inside a byte (``inflatePrime``) nor stop at deflate block
boundaries. Without the compiled module a seek point that starts inside a byte is used by
splicing its stream behind empty deflate blocks that end where the point begins
(:func:`~ofindex.deflate.fast_inflate.splice`). The builder then only places seek points at
member starts.
"""

from __future__ import annotations

import zlib
from typing import Any

from .. import _accel
from ..errors import CorruptRecordError, SidecarError, TruncatedRecordError
from ..formats.compression import RAW_WBITS, TRAILER_BYTES, WBITS, starts_stream
from ..formats.framing import Buffer
from ..formats.seekpoints import SeekKind
from ..formats.sidecar_header import MAX_EXPANSION, Compression
from .fast_inflate import fast_inflate, lead_in_bytes, splice

#: Bytes of history a deflate stream may refer back to.
WINDOW = 32768
#: Input fed to Python's zlib per call: bounds how far an error position can be off.
_PY_STEP = 64 << 10

STATUS_OK, STATUS_END, STATUS_NEED_DICT, STATUS_DATA_ERROR = 0, 1, 2, -3


class InflateFailure(Exception):
    """The compressed data is bad or ends early (internal: callers turn it into a
    :class:`CorruptRecordError` naming the record with :meth:`error`).

    Attributes:
        offset: Compressed byte offset in the file where inflating failed.
        produced: Uncompressed bytes produced before the failure (from the span's start).
        why: zlib's message, or what is missing.
        truncated: The data ended early (rather than being malformed).
    """

    def __init__(self, offset: int, produced: int, why: str, truncated: bool) -> None:
        super().__init__(why)
        self.offset, self.produced, self.why, self.truncated = offset, produced, why, truncated

    def error(self, url: str, record: int, compression: Compression) -> CorruptRecordError:
        """The public error for ``record`` of ``url``."""
        name = compression.name.lower()
        if self.truncated:
            return TruncatedRecordError(
                f"{url}: record {record}: the {name} data ends at compressed byte offset "
                f"{self.offset} ({self.why}); the file is truncated — re-copy it, or index "
                "the records before that with `ofindex build --allow-partial`",
                path=url, offset=self.offset, record=record,
            )
        return CorruptRecordError(
            f"{url}: record {record}: the {name} data is corrupt at compressed byte offset "
            f"{self.offset} ({self.why}); the file is damaged — re-copy it, or index the "
            "records before that with `ofindex build --allow-partial`",
            path=url, offset=self.offset, record=record,
        )


def in_stream_error(exc: CorruptRecordError, compression: Compression,
                    compressed_offset: int) -> CorruptRecordError:
    """``exc`` (about a record found bad in a decompressed stream) telling where its
    compressed data is."""
    note = (f" [byte offsets here are in the uncompressed stream of this "
            f"{compression.name.lower()} file; the record's compressed data lies at or after "
            f"compressed byte offset {compressed_offset}]")
    return type(exc)(str(exc) + note, path=exc.path, offset=exc.offset, record=exc.record,
                     stored_crc=exc.stored_crc, computed_crc=exc.computed_crc)


class PyInflater:
    """Python's zlib with the compiled ``Inflater``'s interface, minus ``block``,
    ``prime`` and ``window`` (see the module docstring)."""

    def __init__(self, wbits: int, track: bool = False) -> None:
        self.message = ""
        self.reset(wbits)

    def reset(self, wbits: int) -> None:
        """Start a new stream (another member, or raw deflate)."""
        self._wbits = wbits
        self._d: Any = zlib.decompressobj(wbits)

    def marks(self) -> None:
        """No marks: Python's zlib does not say where it was inside a call."""
        return None

    def set_dictionary(self, window: bytes) -> None:
        """Give a raw stream the output before it."""
        if window:
            self._d = zlib.decompressobj(self._wbits, zdict=window)

    def inflate(self, src: Buffer, dst: Any, block: bool = False) -> tuple[int, int, int, int]:
        """Inflate ``src`` into ``dst``: ``(used, produced, status, 0)`` as the compiled one."""
        if block:
            raise NotImplementedError("Python's zlib cannot stop at deflate blocks")
        src, dst = memoryview(src), memoryview(dst)
        used = produced = 0
        d = self._d
        while produced < len(dst) and used < len(src):
            piece = src[used : used + _PY_STEP]
            try:
                out = d.decompress(piece, len(dst) - produced)
            except zlib.error as exc:
                self.message = str(exc).partition(": ")[2] or str(exc)
                return used, produced, STATUS_DATA_ERROR, 0
            dst[produced : produced + len(out)] = out
            produced += len(out)
            if d.eof:  # the input left over is in unused_data (and in unconsumed_tail too)
                used += len(piece) - len(d.unused_data)
                return used, produced, STATUS_END, 0
            used += len(piece) - len(d.unconsumed_tail)
            if not out and len(d.unconsumed_tail) == len(piece):
                break  # no progress
        return used, produced, STATUS_OK, 0


def new_inflater(wbits: int, track: bool = False, every: int = 0) -> Any:
    """An inflater for one stream.

    Args:
        wbits: -15 (raw deflate), 15 (zlib) or 31 (gzip).
        track: Keep the last 32 KiB of output (compiled only: for seek point windows).
        every: Note the input used and output made after each ``every`` bytes of output
            (compiled only: its ``marks()``; Python's gives ``None``).

    Returns:
        A compiled ``Inflater`` when the module is built, else a :class:`PyInflater`.
    """
    native = _accel.native
    if native is not None:
        return native.Inflater(wbits, track, every)
    return PyInflater(wbits, track)


def check_inflatable(url: str, record: int, want: int, compressed_bytes: int) -> None:
    """Refuse to inflate ``want`` bytes from ``compressed_bytes`` of compressed data when
    deflate cannot produce that much (the index asking is forged or corrupt), before a buffer
    of that size is allocated.

    Args:
        url: The data file (for the message).
        record: The record whose end asks for the bytes.
        want: Uncompressed bytes the index asks for.
        compressed_bytes: Compressed bytes available to produce them.

    Raises:
        SidecarError: ``want`` is more than ``compressed_bytes`` can inflate to.
    """
    if want > MAX_EXPANSION * max(compressed_bytes, 0) + WINDOW:
        raise SidecarError(
            f"{url}: record {record}: the index asks to inflate {want} bytes from "
            f"{compressed_bytes} compressed bytes, more than deflate can produce; the sidecar "
            "is corrupt — rebuild it with `ofindex build`")


def can_prime() -> bool:
    """Whether the compiled inflater (block boundaries, priming) is in use."""
    return _accel.native is not None


def inflate_span(src: Buffer, base: int, kind: int, bits: int, window: bytes,
                 compression: Compression, want: int) -> bytearray | bytes:
    """Inflate ``want`` bytes starting at a seek point.

    Args:
        src: The compressed bytes from the point on (from the byte before it when ``bits``).
        base: File offset of ``src[0]`` (for errors).
        kind: The point's :class:`SeekKind`.
        bits: For a primed point, the bits of ``src[0]`` that belong to its block.
        window: For a primed point, the output before it (up to 32 KiB).
        compression: The file's compression (how members or streams follow each other).
        want: Uncompressed bytes to produce.

    Returns:
        The bytes (through ISA-L when it is installed and the span lies in one stream: see
        :mod:`.fast_inflate`; else through zlib).

    Raises:
        InflateFailure: The data is bad or ends before ``want`` bytes.
    """
    fast = fast_inflate(src, kind, bits, window, compression, want)
    if fast is not None:
        return fast
    out = bytearray(want)
    view = memoryview(out)
    raw = kind in (SeekKind.PRIMED, SeekKind.ALIGNED)
    spliced = False
    if kind == SeekKind.PRIMED and bits and not can_prime():  # Python's zlib cannot prime
        src, spliced, base = splice(src, bits), True, base + 1 - lead_in_bytes(bits)
    inf = new_inflater(RAW_WBITS if raw else WBITS[compression])
    pos = 0
    if kind == SeekKind.PRIMED:
        if bits and not spliced:
            inf.prime(bits, src[0] >> (8 - bits))
            pos = 1
        inf.set_dictionary(window)
    src = memoryview(src)
    produced = 0
    while produced < want:
        used, got, status, _ = inf.inflate(src[pos:], view[produced:])
        pos += used
        produced += got
        if status == STATUS_DATA_ERROR:
            raise InflateFailure(base + pos, produced, inf.message, truncated=False)
        if status == STATUS_NEED_DICT:
            raise InflateFailure(base + pos, produced, "a preset dictionary is needed",
                                 truncated=False)
        if status == STATUS_END and produced < want:
            if raw:  # the trailer of a member or stream entered raw: skip it unchecked
                pos += TRAILER_BYTES[compression]
            if not starts_stream(src[pos : pos + 10], compression):
                at_end = pos >= len(src)
                raise InflateFailure(base + min(pos, len(src)), produced,
                                     "the stream ends early" if at_end else
                                     f"no {compression.name.lower()} stream follows the last "
                                     "one", truncated=at_end)
            inf.reset(WBITS[compression])
            raw = False
        elif status == STATUS_OK and got == 0 and used == 0:
            raise InflateFailure(base + pos, produced, "the compressed data ends early",
                                 truncated=True)
    return out
