"""Turning a text ``offset length`` index (tfrecord2idx, NVIDIA DALI) into a sidecar.

Nothing in the text index is taken on trust: every line is parsed and checked against the
data file's size (:mod:`ofindex.formats.textindex`), then against the record framing, which
the data file is scanned for exactly as ``ofindex build`` scans it. The sidecar written is
the one a build would write (without CRC checks of the payloads).
"""

from __future__ import annotations

import warnings

import numpy as np

from ..errors import CorruptRecordError, OfindexError, StaleIndexError
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
