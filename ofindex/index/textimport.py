"""Turning a text ``offset length`` index (tfrecord2idx, NVIDIA DALI) into a sidecar.

Nothing in the text index is taken on trust: every line is parsed and checked against the
data file's size (:mod:`ofindex.formats.textindex`), then against the record framing, which
the data file is scanned for exactly as ``ofindex build`` scans it. The sidecar written is
the one a build would write (without CRC checks of the payloads).
"""

from __future__ import annotations

import os
import re
import stat
import warnings

import numpy as np

from ..errors import CorruptRecordError, OfindexError, SidecarError, StaleIndexError
from ..formats.framing import RecordFormat
from ..formats.sidecar import encode_sidecar
from ..formats.sidecar_header import Compression
from ..formats.textindex import check_framing, check_spans, parse_text
from ..storage import Storage
from ..storage.identity import with_content
from ..storage.readahead import STREAM_CHUNK, ReadAhead
from .build_file import detect_file_layout
from .scan import scan_file

#: Where the framing puts the records: offsets, where the last one ends, and what stopped the
#: scan early (a message), or ``None``.
Framing = tuple[np.ndarray, int, str | None]

#: Bytes a text index may take per record of its data file: a line of two numbers of up to
#: 19 digits, their separator and a line end is 41 bytes; 64 leave room for padding.
LINE_BYTES = 64
#: Bytes a text index may take beyond that (trailing blank lines, an empty file's index).
SLACK_BYTES = 4096
#: No line of a text index is longer: a thousand times a real line, so that a line's own
#: check names what is wrong with it (a number of 5,000 digits); a stream without line ends,
#: such as /dev/zero, is refused after this many bytes, whatever the data file's size.
MAX_LINE = 64 << 10
_LONG_LINE = re.compile(rb"[^\n]{%d}" % (MAX_LINE + 1))
#: Bytes read at a time from a stream (a FIFO, a device).
_CHUNK = 1 << 20


def text_index_limit(data_size: int) -> int:
    """The most bytes a text index of a data file of ``data_size`` bytes may hold: one line
    of :data:`LINE_BYTES` per record of the smallest framing (an empty record), and
    :data:`SLACK_BYTES`.

    Args:
        data_size: The data file's size.

    Returns:
        The bound, in bytes.
    """
    smallest = min(fmt.overhead for fmt in RecordFormat)
    return LINE_BYTES * (data_size // smallest) + SLACK_BYTES


def read_text_index(storage: Storage, path: str, data_size: int, *, data_url: str) -> bytes:
    """The bytes of the text index at ``path``, read up to :func:`text_index_limit` of the
    data file's size: a regular file larger than that is refused before it is read, and a
    stream (a FIFO, ``<(…)``, a device such as ``/dev/zero``) is read a chunk at a time and
    refused once past the bound or at a line longer than :data:`MAX_LINE` bytes.

    Args:
        storage: Storage of the text index.
        path: The text index.
        data_size: Size of the data file it describes.
        data_url: The data file (for messages).

    Returns:
        The text index's bytes (each line is checked later, by :func:`sidecar_from_text`).

    Raises:
        SidecarError: The text index is larger than any of that data file, or has a line
            longer than any text index has (naming the limit).
    """
    limit = text_index_limit(data_size)
    url = storage.url(path)
    if not storage.is_local:
        if storage.stamp(path).size > limit:
            raise _too_large(url, limit, data_url, data_size)
        return storage.read_all(path)
    chunks: list[bytes] = []
    total = lines = tail = 0  # bytes, line ends, bytes of the last line so far
    with open(path, "rb", buffering=0) as stream:
        found = os.fstat(stream.fileno())
        if stat.S_ISREG(found.st_mode) and found.st_size > limit:
            raise _too_large(url, limit, data_url, data_size)
        while chunk := stream.read(min(_CHUNK, limit + 1 - total)):
            first = chunk.find(b"\n")
            long = _LONG_LINE.search(chunk)
            if tail + (len(chunk) if first < 0 else first) > MAX_LINE or long is not None:
                line = lines + 1 + (chunk.count(b"\n", 0, long.start()) if long else 0)
                raise SidecarError(
                    f"{url}, line {line}: longer than {MAX_LINE} bytes, which no line of a "
                    f"text index is: it is not a text index — name the 'offset length' file "
                    f"written for {data_url}")
            last = chunk.rfind(b"\n")
            tail = tail + len(chunk) if last < 0 else len(chunk) - last - 1
            lines += chunk.count(b"\n")
            total += len(chunk)
            if total > limit:
                raise _too_large(url, limit, data_url, data_size)
            chunks.append(chunk)
    return b"".join(chunks)


def _too_large(url: str, limit: int, data_url: str, data_size: int) -> SidecarError:
    return SidecarError(
        f"{url}: longer than the text index of {data_url} can be ({limit} bytes for a data "
        f"file of {data_size} bytes: {LINE_BYTES} per record at most); it is not that file's "
        "text index — name the 'offset length' file written for it")


def sidecar_from_text(storage: Storage, path: str, text: bytes, *, text_url: str,
                      fmt: RecordFormat | None = None) -> tuple[bytes, bytes, int]:
    """A sidecar for the data file ``path`` from its text index, after checking every line.

    Args:
        storage: Storage of the data file.
        path: The data file (uncompressed).
        text: The text index's bytes.
        text_url: Where the text index was read (for messages).
        fmt: The data file's framing, or ``None`` to detect it.

    Returns:
        ``(header, body, records)``: the sidecar's parts and its number of records.

    Raises:
        SidecarError: A line of the text index is malformed (not two numbers, a number above
            ``2**63 - 1``, a record shorter than its framing); the message names the line.
        StaleIndexError: A line's span is not the record the data file holds there (out of
            order, overlapping, past the end, missing lines, or another length than the
            record's header gives), or the data file changed meanwhile.
        CorruptRecordError: The data file is damaged where a line of the text index points.
        FormatDetectionError: The data file's framing cannot be detected.
        OfindexError: The data file is compressed (a text index describes uncompressed files).
    """
    stamp = storage.stamp(path)
    url = storage.url(path)
    # remote files stream once, in large sequential chunks, as the index builder reads them
    source = storage if storage.is_local else ReadAhead(storage, path, stamp.size,
                                                           STREAM_CHUNK)
    try:
        compression, found = detect_file_layout(source, path, stamp.size, fmt=fmt)
        if compression is not Compression.NONE:
            raise OfindexError(
                f"{url}: the file is {compression.name.lower()}-compressed; a text index "
                "describes an uncompressed file — run `ofindex build` on it instead")
        fmt = found or RecordFormat.TFRECORD
        offsets, lengths = parse_text(text, path=text_url, data_url=url)
        check_spans(offsets, lengths, fmt, stamp.size, path=text_url, data_url=url)
        framed, end, problem = _framing(source, storage, path, fmt, stamp.size)
    finally:
        if isinstance(source, ReadAhead):
            source.close()
    check_framing(offsets, lengths, framed, end, problem, path=text_url, data_url=url)
    stamp = with_content(storage, path, stamp)  # its identity, before the last look
    changed = stamp.mismatch(storage.stamp(path))
    if changed:
        raise StaleIndexError(f"{url}: the file changed while its text index was checked "
                              f"({changed}); run `ofindex import-index` again once writing has "
                              "finished")
    header, body = encode_sidecar(fmt, offsets, stamp, stamp.size)
    return header, body, len(offsets)


def _framing(source: Storage | ReadAhead, storage: Storage, path: str, fmt: RecordFormat,
             size: int) -> Framing:
    """Scan the data file for its records, as the index builder does; past damage, the
    records before it and what the damage is."""
    if size == 0:
        return np.empty(0, dtype=np.uint64), 0, None
    try:
        scanned = scan_file(source, path, fmt, size)
        return scanned.offsets, scanned.indexed_end, None
    except CorruptRecordError as exc:  # the records before it: scanned again, from storage
        problem = str(exc.args[0])       # (a read-ahead view streams once)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the damage is reported by the caller
        prefix = scan_file(storage, path, fmt, size, allow_partial=True)
    return prefix.offsets, prefix.indexed_end, problem
