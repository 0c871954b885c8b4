"""Which compression and record framing a file uses, from its first bytes.

Compression is settled first: a GZIP file written by TensorFlow starts ``1f 8b 08 00``, which
read as an OFRecord length is plausible, so framing is only guessed from uncompressed bytes
(the file's own, or the first decompressed ones).
"""

from __future__ import annotations

import struct

from ..errors import FormatDetectionError, hint
from .compression import inflate_head, starts_stream
from .crc import masked_crc32c
from .framing import MAX_RECORD_BYTES, RecordFormat
from .sidecar_header import Compression

_LEN_CRC = struct.Struct("<QI")
_SIGNED_LEN = struct.Struct("<q")

#: The next step when a file's framing cannot be told, in both audiences' terms.
FORMAT_HINT = hint("format='tfrecord' or format='ofrecord'",
                   "--format tfrecord or --format ofrecord")

#: Bytes of a file to read for :func:`detect_layout` (a deflate header and first block).
HEAD_BYTES = 16 << 10


def _tfrecord_header(head: bytes) -> bool:
    """A valid TFRecord header: its length CRC matches (chance 2**-32 otherwise), whether or
    not the file holds the whole record (a file cut short is still TFRecord: the scan then
    names where it ends)."""
    if len(head) < 12:
        return False
    _, stored = _LEN_CRC.unpack_from(head)
    return bool(stored == masked_crc32c(head[:8]))


def _framing_of(head: bytes, file_size: int | None) -> RecordFormat | None:
    """The framing the first bytes of an uncompressed stream show: a valid TFRecord header,
    else a plausible OFRecord length (at most the rest of the file); ``None`` for neither."""
    if _tfrecord_header(head):
        return RecordFormat.TFRECORD
    if len(head) >= 8:
        (length,) = _SIGNED_LEN.unpack_from(head)
        limit = MAX_RECORD_BYTES if file_size is None else file_size - 8
        if 0 <= length <= limit:
            return RecordFormat.OFRECORD
    return None


def detect_format(head: bytes, file_size: int | None, *, path: str) -> RecordFormat | None:
    """Guess the framing from the first bytes of an uncompressed stream (at least 12 bytes
    when available).

    Args:
        head: The first bytes.
        file_size: The stream's size, or ``None`` when unknown (a decompressed stream).
        path: The file, for messages.

    Returns:
        The framing, or ``None`` for an empty stream (either format fits zero records). A
        stream whose first header is a valid TFRecord header (length CRC matches, chance
        2**-32 otherwise) is TFRecord; otherwise a plausible OFRecord length makes it OFRecord.

    Raises:
        FormatDetectionError: Neither framing fits.
    """
    if file_size == 0 or (file_size is None and not head):
        return None
    found = _framing_of(head, file_size)
    if found is not None:
        return found
    size = "unknown" if file_size is None else file_size
    raise FormatDetectionError(
        f"{path}: cannot detect the record format: the first {min(len(head), 12)} bytes are "
        f"neither a valid TFRecord header nor a plausible OFRecord length (size {size}); "
        f"if this is a record file, pass {FORMAT_HINT} explicitly, otherwise it is not a "
        "TFRecord/OFRecord file"
    )


def detect_layout(
    head: bytes, file_size: int, *, path: str, compression: Compression | None = None,
    fmt: RecordFormat | None = None,
) -> tuple[Compression, RecordFormat | None]:
    """Detect a file's compression and framing from its first bytes (up to
    :data:`HEAD_BYTES`).

    A file that starts with a valid TFRecord header is uncompressed TFRecord; one that starts
    with a gzip or zlib header and inflates cleanly is compressed; else its bytes are framing.
    A file with a gzip/zlib header that fits no framing either is taken as damaged compressed
    data (the build then names the bad compressed offset).

    Args:
        head: The first bytes of the file.
        file_size: Its size.
        path: The file, for messages.
        compression: The compression when known, ``None`` to detect it.
        fmt: The framing when known, ``None`` to detect it.

    Returns:
        ``(compression, framing)``; the framing is ``None`` when the (decompressed) stream is
        empty.

    Raises:
        FormatDetectionError: The bytes fit no framing, or are not the compression given.
    """
    if compression is None:
        if _tfrecord_header(head):
            return Compression.NONE, fmt or RecordFormat.TFRECORD
        looks = [c for c in (Compression.GZIP, Compression.ZLIB) if starts_stream(head, c)]
        compression = next((c for c in looks if inflate_head(head, c) is not None), None)
        if compression is None:
            try:
                return Compression.NONE, fmt or detect_format(head, file_size, path=path)
            except FormatDetectionError:
                if not looks:
                    raise
            return looks[0], fmt or RecordFormat.TFRECORD  # inflating will say where it breaks
    if compression is Compression.NONE:
        return compression, fmt if fmt is not None else detect_format(head, file_size,
                                                                          path=path)
    got = inflate_head(head, compression) if file_size else None
    if got is None:
        name = compression.name.lower()
        raise FormatDetectionError(
            f"{path}: not {name} data (its first bytes do not inflate as {name}); pass the "
            "right compression= ('gzip', 'zlib' or None) or leave it 'auto'"
        )
    data, ended = got
    if fmt is not None:
        return compression, fmt
    if not data:  # an empty stream, or one cut short before its first byte
        return compression, None if ended else RecordFormat.TFRECORD
    try:
        return compression, detect_format(data, None, path=path)
    except FormatDetectionError:
        raise FormatDetectionError(
            f"{path}: a {compression.name.lower()} file whose decompressed bytes are neither "
            "TFRecord nor OFRecord records; pass format='tfrecord' or format='ofrecord' if it "
            "is a record file"
        ) from None


def may_hold_records(head: bytes, file_size: int) -> bool:
    """Tell whether a file could be a record file, from its first bytes (``HEAD_BYTES``, or
    the whole file when shorter).

    Args:
        head: The first bytes.
        file_size: The file's size.

    Returns:
        ``True`` for an empty file (zero records of either framing), a valid TFRecord header,
        a plausible OFRecord length, or a gzip/zlib header; ``False`` for a file that is
        plainly not TFRecord/OFRecord (text, JSON, an image …).
    """
    return (file_size == 0 or _framing_of(head, file_size) is not None
            or any(starts_stream(head, c) for c in (Compression.GZIP, Compression.ZLIB)))


def sniff_framing(head: bytes, file_size: int, compression: Compression) -> RecordFormat | None:
    """The framing a file's first bytes show, knowing its compression.

    Args:
        head: The first bytes of the file.
        file_size: Its size.
        compression: How it is compressed.

    Returns:
        The framing its (decompressed) first bytes show, or ``None`` when they show none: an
        empty stream, bytes that do not inflate, or bytes that fit neither framing.
    """
    if compression is Compression.NONE:
        return _framing_of(head, file_size) if file_size else None
    got = inflate_head(head, compression)
    if got is None or not got[0]:
        return None
    return _framing_of(got[0], None)
