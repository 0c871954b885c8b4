"""The records of a data file that has no index, front to back from the file's start, gzip/zlib
inflated on the way, no sidecar read or written: a look at files you were given (``ofindex
schema``, ``head`` and ``info`` before ``ofindex build``: :func:`peek_file`), and converting
files you may not index (:class:`RecordStream`).

Each record is checked as a scan checks it: its header before anything is read or allocated
from its length (TFRecord's length CRC; a length past the end of an uncompressed file), then
its payload's CRC. The file is read in pieces of :data:`PIECE` bytes as its records need them,
so a corrupt length in a compressed stream costs no more memory than the stream holds.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Generator

from ...deflate.inflate import InflateFailure
from ...deflate.stream import InflatedStream
from ...errors import TruncatedRecordError
from ...formats.detect import HEAD_BYTES, detect_layout
from ...formats.framing import RecordFormat, parse_header, payload_matches, unframe
from ...formats.sidecar_header import Compression
from ...storage import Storage
from ...storage.readahead import ReadAhead

#: Bytes read at once (a record's memory grows only as its bytes arrive).
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


class RecordStream:
    """The records of one data file, front to back, without its index.

    Args:
        storage: The file's storage.
        path: The file.
        fmt: Its framing, or ``None`` to detect it from its first bytes.
        compression: Its compression, or ``None`` to detect it.
        verify: Check TFRecord payload CRCs.

    Attributes:
        compression: The file's compression.
        format: Its framing (``None``: the file, or its decompressed stream, is empty).
        size: Its size in bytes.

    Raises:
        FormatDetectionError: The first bytes fit no framing (or not the compression given).
    """

    def __init__(self, storage: Storage, path: str, *, fmt: RecordFormat | None = None,
                 compression: Compression | None = None, verify: bool = True) -> None:
        self.storage, self.path, self.verify = storage, path, verify
        self.size = storage.stamp(path).size
        self.url = storage.url(path)
        head = storage.read_block(path, 0, HEAD_BYTES) if self.size else b""
        self.compression, self.format = detect_layout(head, self.size, path=self.url,
                                                      compression=compression, fmt=fmt)

    def records(self) -> Generator[bytes, None, None]:
        """The payloads, in file order (the file is read as they are taken).

        Raises:
            CorruptRecordError: A record's header or CRC is bad, or its length impossible.
            TruncatedRecordError: The file, or its compressed stream, ends inside a record.
        """
        fmt = self.format
        if fmt is None:
            return
        with contextlib.ExitStack() as stack:
            reader: Storage | ReadAhead = self.storage
            if not self.storage.is_local:  # the next piece is on its way while one is cut
                reader = stack.enter_context(ReadAhead(self.storage, self.path, self.size))
            pieces = _Pieces(reader, self.path, self.size, self.compression)
            try:
                yield from self._cut(pieces, fmt)
            except InflateFailure as failure:
                raise failure.error(self.url, pieces.record, self.compression) from None

    def _cut(self, pieces: _Pieces, fmt: RecordFormat) -> Generator[bytes, None, None]:
        known = self.size if self.compression is Compression.NONE else None
        record = 0
        while True:
            pieces.record = record
            pos = pieces.pos
            header = pieces.take(fmt.header_size)
            if not header:
                return  # the end of the file, between records
            length = parse_header(header, fmt, path=self.url, offset=pos, record=record,
                                  file_size=known)
            rest = pieces.take(length + fmt.footer_size)
            if len(rest) < length + fmt.footer_size:
                raise TruncatedRecordError(
                    f"{self.url}: the {'decompressed ' if known is None else ''}data ends "
                    f"inside record {record} at byte offset {pos} ({length} payload bytes "
                    "claimed); the file is truncated or corrupt",
                    path=self.url, offset=pos, record=record)
            payload = rest[:length] if fmt.footer_size else rest
            if not payload_matches(header, payload, rest[length:], fmt, self.verify):
                unframe(header + rest, fmt, verify=self.verify, path=self.url, offset=pos,
                        record=record)  # raises the precise error
            yield payload
            record += 1


class _Pieces:
    """The (decompressed) bytes of one file taken front to back, read :data:`PIECE` bytes at
    a time."""

    def __init__(self, reader: Storage | ReadAhead, path: str, size: int,
                 compression: Compression) -> None:
        self.reader, self.path, self.size = reader, path, size
        self.stream = (None if compression is Compression.NONE
                       else InflatedStream(reader, path, size, compression, 0))
        self.buffer = bytearray()
        self.at = 0       # the offset of buffer[0]
        self.pos = 0      # the next byte to take
        self.record = 0   # the record being cut, for messages
        self.ended = False

    def take(self, n: int) -> bytes:
        """The next ``n`` bytes (fewer at the end of the stream)."""
        while self.at + len(self.buffer) < self.pos + n and not self.ended:
            self._read()
        start = self.pos - self.at
        got = bytes(self.buffer[start : start + n])
        self.pos += len(got)
        if self.pos - self.at >= PIECE:  # let go of what was taken
            del self.buffer[: self.pos - self.at]
            self.at = self.pos
        return got

    def _read(self) -> None:
        start = self.at + len(self.buffer)
        if self.stream is None:
            piece = self.reader.read_block(self.path, start, PIECE)
        else:
            piece = self.stream.read(self.path, start, start + PIECE)
        self.buffer += piece
        self.ended = len(piece) < PIECE if self.stream is None else not piece


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
    stream = RecordStream(storage, path, fmt=fmt, compression=compression, verify=verify)
    records: list[bytes] = []
    if count > 0:
        taking = stream.records()
        try:
            for payload in taking:
                records.append(payload)
                if len(records) >= count:
                    break
        finally:
            taking.close()
    return PeekedFile(stream.compression, stream.format, records, stream.size)
