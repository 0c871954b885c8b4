"""Checks the scanner applies to a block of records: headers (one by one or in bulk with
numpy), payload CRCs, and streamed verification of records larger than a block."""

from __future__ import annotations

import struct

import crc32c as _crc32c
import numpy as np

from ..deflate.stream import InflatedStream
from ..errors import CorruptRecordError, TruncatedRecordError
from ..formats.crc import mask_crc, masked_length_crcs, unmask_crcs
from ..formats.framing import (
    MAX_RECORD_BYTES,
    Buffer,
    RecordFormat,
    check_data_crc,
    data_crc_error,
    parse_header,
)
from ..storage import Storage
from ..storage.readahead import ReadAhead

_CRC = struct.Struct("<I").unpack_from

#: Payload lengths (int64) of the records up to the first bad one, and that one's error.
HeaderCheck = tuple[np.ndarray, CorruptRecordError | None]


def check_headers(buffer: Buffer, at: np.ndarray, walk_end: int, base: int, n: int, size: int,
                  fmt: RecordFormat, url: str, first_record: int) -> HeaderCheck:
    """Check the headers the walk found at block offsets ``at`` (the walk stopped at
    ``walk_end``) in a block starting at file offset ``base``.

    Returns the payload lengths (int64) of the records up to the first bad one, and that one's
    error (or ``None``).
    """
    if len(at) <= 16:
        return _check_headers_few(buffer, at, base, size, fmt, url, first_record)
    return _check_headers_bulk(buffer, at, walk_end, base, n, size, fmt, url, first_record)


def first_bad_data_crc(buffer: Buffer, loc: np.ndarray, lengths: np.ndarray,
                       hs: int) -> int | None:
    """Index of the first record whose payload CRC is wrong, or ``None``."""
    at = np.add(loc, hs + np.asarray(lengths, dtype=np.int64))  # footer positions
    raw = np.frombuffer(buffer, dtype=np.uint8)
    stored = unmask_crcs(raw[at[:, None] + np.arange(4)].view("<u4").ravel()).tolist()
    mv = memoryview(buffer)
    crc = _crc32c.crc32c
    starts = (np.asarray(loc, dtype=np.int64) + hs).tolist()
    for j, (o, e) in enumerate(zip(starts, at.tolist(), strict=True)):
        if crc(mv[o:e]) != stored[j]:
            return j
    return None


def data_crc_problem(buffer: Buffer, o: int, length: int, hs: int, *, url: str, base: int,
                     record: int) -> CorruptRecordError:
    """The error for the record at block offset ``o`` whose payload CRC is wrong."""
    try:
        check_data_crc(memoryview(buffer)[o + hs : o + hs + length],
                       _CRC(buffer, o + hs + length)[0],
                       path=url, offset=base + o, record=record)
    except CorruptRecordError as exc:
        return exc
    raise AssertionError("CRC check passed on a record reported bad")  # pragma: no cover


def _check_headers_few(buffer: Buffer, at: np.ndarray, base: int, size: int, fmt: RecordFormat,
                       url: str, first_record: int) -> HeaderCheck:
    """Header checks one by one (cheaper than numpy for a handful of large records)."""
    lengths: list[int] = []
    mv = memoryview(buffer)
    hs = fmt.header_size
    problem = None
    for j, o in enumerate(at.tolist()):
        try:
            lengths.append(parse_header(mv[o : o + hs], fmt, path=url, offset=base + o,
                                        record=first_record + j, file_size=size))
        except CorruptRecordError as exc:
            problem = exc
            break
    return np.array(lengths, dtype=np.int64), problem


def _check_headers_bulk(buffer: Buffer, at: np.ndarray, walk_end: int, base: int, n: int,
                        size: int, fmt: RecordFormat, url: str,
                        first_record: int) -> HeaderCheck:
    """Header checks for many records at once. The walk already read every length (they are
    the gaps between the positions it found), so only the length CRCs are gathered."""
    ov = fmt.overhead
    lengths = np.diff(at, append=min(walk_end, 1 << 62)) - ov
    bad = (lengths < 0) | (lengths > MAX_RECORD_BYTES)
    if fmt is RecordFormat.TFRECORD:
        raw = np.frombuffer(buffer, dtype=np.uint8, count=n)
        stored = raw[at + 8].astype(np.uint32)
        for k in (1, 2, 3):
            stored |= raw[at + (8 + k)].astype(np.uint32) << np.uint32(8 * k)
        as_bytes = lengths.astype("<u8").view(np.uint8).reshape(-1, 8)
        nbytes = (int(lengths.max()).bit_length() + 7) // 8 if lengths.min() >= 0 else 8
        bad |= stored != masked_length_crcs(as_bytes, nbytes)
    bad |= base + at + ov + lengths > size
    if not bad.any():
        return lengths, None
    first_bad = int(np.argmax(bad))
    good, problem = _check_headers_few(buffer, at[first_bad : first_bad + 1], base, size, fmt,
                                       url, first_record + first_bad)
    assert problem is not None and not len(good), "bulk and scalar header checks disagree"
    return lengths[:first_bad], problem


def verify_streaming(
    storage: Storage | ReadAhead | InflatedStream, path: str, url: str, start: int, size: int,
    fmt: RecordFormat, record: int, buffer: bytearray, *, crc: bool = True,
    checksum: bool = False, keep: bytearray | None = None,
) -> tuple[int, int]:
    """Stream one record larger than a block through CRC32C (with ``crc``, the TFRecord data
    CRC is checked; with ``checksum``, the payload's CRC32C is computed for the sidecar; else
    only check that all of it is there); with ``keep``, its payload is appended to ``keep``
    (for the columns of the record).

    Returns:
        Where the record ends, and its payload's CRC32C (0 unless computed).
    """
    view = memoryview(buffer)
    head = storage.read(path, start, start + fmt.header_size)
    length = parse_header(head, fmt, path=url, offset=start, record=record, file_size=size)
    pos = start + fmt.header_size
    stop = pos + length
    check = crc and fmt is RecordFormat.TFRECORD
    value = 0
    while pos < stop:
        n = storage.read_into(path, pos, view[: min(len(buffer), stop - pos)])
        if n <= 0:
            raise _ends_inside(url, start, record, pos)
        if check or checksum:
            value = _crc32c.crc32c(view[:n], value)
        if keep is not None:
            keep += view[:n]
        pos += n
    foot = storage.read(path, stop, stop + fmt.footer_size)
    if len(foot) < fmt.footer_size:
        raise _ends_inside(url, start, record, stop)
    if check:
        (stored,) = _CRC(foot)
        if mask_crc(value) != stored:
            raise data_crc_error(stored, mask_crc(value), path=url, offset=start, record=record)
    return stop + fmt.footer_size, value


def _ends_inside(url: str, start: int, record: int, at: int) -> TruncatedRecordError:
    return TruncatedRecordError(
        f"{url}: the data ends at byte {at}, inside record {record} at byte offset {start} "
        "(the file is truncated, or shrank while it was read); re-copy it, or index the valid "
        "prefix with `ofindex build --allow-partial`",
        path=url, offset=start, record=record,
    )
