"""Which record framing a file uses, from its first bytes."""

from __future__ import annotations

import struct

from ..errors import FormatDetectionError, hint
from .crc import masked_crc32c
from .framing import RecordFormat

_LEN_CRC = struct.Struct("<QI")
_SIGNED_LEN = struct.Struct("<q")

#: The next step when a file's framing cannot be told, in both audiences' terms.
FORMAT_HINT = hint("format='tfrecord' or format='ofrecord'",
                   "--format tfrecord or --format ofrecord")


def detect_format(head: bytes, file_size: int, *, path: str) -> RecordFormat | None:
    """Guess the framing from the first bytes of a file (at least 12 bytes when available).

    Returns ``None`` for an empty file (either format fits zero records). A file whose first
    header is a valid TFRecord header (length CRC matches, chance 2**-32 otherwise) is TFRecord;
    otherwise a plausible OFRecord length makes it OFRecord; anything else is an error.
    """
    if file_size == 0:
        return None
    if len(head) >= 12:
        length, stored = _LEN_CRC.unpack_from(head)
        if stored == masked_crc32c(head[:8]) and 16 + length <= file_size:
            return RecordFormat.TFRECORD
    if len(head) >= 8:
        (length,) = _SIGNED_LEN.unpack_from(head)
        if length >= 0 and 8 + length <= file_size:
            return RecordFormat.OFRECORD
    raise FormatDetectionError(
        f"{path}: cannot detect the record format: the first {min(len(head), 12)} bytes are "
        f"neither a valid TFRecord header nor a plausible OFRecord length (file size {file_size}); "
        f"if this is a record file, pass {FORMAT_HINT} explicitly, otherwise it is not a "
        "TFRecord/OFRecord file"
    )
