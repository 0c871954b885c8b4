"""The first records of a data file that has no index yet: a look at files you were given
(``ofindex schema``, ``head`` and ``info`` before ``ofindex build``), read front to back from
the file's start, gzip/zlib inflated on the way, no sidecar read or written.

Each record is checked as a scan checks it: its header before anything is read or allocated
from its length (TFRecord's length CRC; a length past the end of an uncompressed file), then
its payload's CRC. A payload is read in pieces as its bytes arrive, so a corrupt length in a
compressed stream costs no more memory than the stream holds.
"""

from __future__ import annotations

import dataclasses

from ..deflate.inflate import InflateFailure
from ..deflate.stream import InflatedStream
from ..errors import TruncatedRecordError
from ..formats.detect import HEAD_BYTES, detect_layout
from ..formats.framing import RecordFormat, parse_header, unframe
from ..formats.sidecar_header import Compression
from ..storage import Storage

#: Bytes of a payload read at once (a record's memory grows only as its bytes arrive).
PIECE = 1 << 20


@dataclasses.dataclass(frozen=True)
class PeekedFile:
    """What the start of one data file holds.

    Attributes:
        compression: The file's compression.
        format: Its record framing (``None``: the file, or its decompressed stream, is empty).
        records: Its first records' payloads (fewer than asked at the end of the file).
        size: The file's size in bytes.
    """

    compression: Compression
    format: RecordFormat | None
    records: list[bytes]
    size: int


class _Bytes:
    """The (decompressed) bytes of one file at increasing offsets: ``read(start, end)``
    returns fewer only at their end."""

    def __init__(self, storage: Storage, path: str, size: int,
                 compression: Compression) -> None:
        self.storage, self.path, self.size = storage, path, size
        self.stream = (None if compression is Compression.NONE
                       else InflatedStream(storage, path, size, compression, 0))

    def read(self, start: int, end: int) -> bytes:
        if self.stream is None:
            return self.storage.read_block(self.path, start, end - start)
        return self.stream.read(self.path, start, end)


def peek_file(storage: Storage, path: str, count: int, *, fmt: RecordFormat | None = None,
              compression: Compression | None = None, verify: bool = True) -> PeekedFile:
    """Read the first ``count`` records of ``path`` without an index.

    Args:
        storage: The file's storage.
        path: The file.
        count: Records to read at most.
        fmt: Its framing, or ``None`` to detect it from its first bytes.
        compression: Its compression, or ``None`` to detect it.
        verify: Check TFRecord payload CRCs.

    Returns:
        The file's compression and framing, and its first records.

    Raises:
        FormatDetectionError: The first bytes fit no framing (or not the compression given).
        CorruptRecordError: A record's header or CRC is bad, or its length impossible.
        TruncatedRecordError: The file, or its compressed stream, ends inside a record.
    """
    size = storage.stamp(path).size
    url = storage.url(path)
    head = storage.read_block(path, 0, HEAD_BYTES) if size else b""
    compression, fmt = detect_layout(head, size, path=url, compression=compression, fmt=fmt)
    if fmt is None or count <= 0:
        return PeekedFile(compression, fmt, [], size)
    source = _Bytes(storage, path, size, compression)
    known = size if compression is Compression.NONE else None
    records: list[bytes] = []
    pos = 0
    try:
        while len(records) < count:
            header = source.read(pos, pos + fmt.header_size)
            if not header:
                break  # the end of the file, between records
            length = parse_header(header, fmt, path=url, offset=pos, record=len(records),
                                  file_size=known)
            raw = bytearray(header)
            end = pos + fmt.overhead + length
            while pos + len(raw) < end:
                piece = source.read(pos + len(raw), min(end, pos + len(raw) + PIECE))
                if not piece:
                    raise TruncatedRecordError(
                        f"{url}: the {'decompressed ' if known is None else ''}data ends inside "
                        f"record {len(records)} at byte offset {pos} ({length} payload bytes "
                        "claimed); the file is truncated or corrupt",
                        path=url, offset=pos, record=len(records))
                raw += piece
            records.append(bytes(unframe(raw, fmt, verify=verify, path=url, offset=pos,
                                         record=len(records))))
            pos = end
    except InflateFailure as failure:
        raise failure.error(url, len(records), compression) from None
    return PeekedFile(compression, fmt, records, size)
