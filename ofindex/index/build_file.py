"""Indexing one data file: detect its framing, scan it once, write its sidecar."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable

from ..errors import StaleIndexError
from ..formats.detect import detect_format
from ..formats.framing import RecordFormat
from ..formats.sidecar import encode_sidecar
from ..storage import Storage
from ..storage.readahead import ReadAhead
from .checksums import payload_checksums
from .scan import scan_file

#: Request size when streaming a remote file for indexing.
STREAM_CHUNK = 8 << 20


@dataclasses.dataclass(frozen=True)
class BuildResult:
    """What the builder did for one data file.

    Attributes:
        data_url: The data file.
        index_url: The sidecar written.
        format: The record framing, or ``None`` for an empty file whose format the caller
            settles.
        records: Records indexed.
        size: Data file size in bytes.
        partial: Only a valid prefix was indexed (``allow_partial=True``).
        problem: Why the index is partial.
        fingerprint: The data file's fingerprint when it was indexed.
    """

    data_url: str
    index_url: str
    format: RecordFormat | None
    records: int
    size: int
    partial: bool = False
    problem: str | None = None
    fingerprint: str = ""


def detect_file_format(storage: Storage, path: str, size: int) -> RecordFormat | None:
    """Detect the framing of one file from its first header (``None`` for an empty file).

    Raises:
        FormatDetectionError: The first bytes fit neither framing.
    """
    head = storage.read_block(path, 0, 12) if size else b""
    return detect_format(head, size, path=storage.url(path))


def build_file(
    storage: Storage, path: str, fmt: RecordFormat | None, index_storage: Storage,
    index_path: str, verify: bool, allow_partial: bool,
    progress: Callable[[int], None] | None = None, checksums: bool = False,
) -> BuildResult:
    """Index one data file and write its sidecar.

    Args:
        storage: Storage of the data file.
        path: The data file.
        fmt: Its framing, or ``None`` to detect it.
        index_storage: Storage of the sidecar.
        index_path: Where the sidecar goes.
        verify: Also check every payload CRC.
        allow_partial: Index the valid prefix of a damaged file instead of failing.
        progress: Called with the number of bytes scanned, now and then.
        checksums: Also store the CRC32C of every payload in the sidecar (reads the whole
            file; see :mod:`ofindex.index.checksums`).

    Returns:
        What was indexed.

    Raises:
        CorruptRecordError: Bad data (unless ``allow_partial``).
        StaleIndexError: The file changed while it was scanned.
        FormatDetectionError: ``fmt`` is ``None`` and the framing cannot be detected.
    """
    stamp = storage.stamp(path)
    # remote files stream once, in large sequential chunks with one chunk in flight
    source = storage if storage.cheap_seeks else ReadAhead(storage, path, stamp.size, STREAM_CHUNK)
    try:
        if fmt is None:
            fmt = detect_file_format(source, path, stamp.size)  # type: ignore[arg-type]
            if fmt is None:  # empty file, format settled by the caller
                return BuildResult(storage.url(path), index_storage.url(index_path), None, 0, 0,
                                   fingerprint=stamp.fingerprint)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # reported by the caller from BuildResult.problem
            result = scan_file(
                source, path, fmt, stamp.size, verify=verify,
                allow_partial=allow_partial, progress=progress,
            )
        sums = (payload_checksums(source, path, fmt, result.offsets, result.indexed_end)
                if checksums else None)
    finally:
        if isinstance(source, ReadAhead):
            source.close()
    why = stamp.mismatch(storage.stamp(path))
    if why:
        raise StaleIndexError(
            f"{storage.url(path)}: the file changed while it was being indexed ({why}); "
            "run `ofindex build` again once writing has finished"
        )
    header, body = encode_sidecar(fmt, result.offsets, stamp, result.indexed_end, result.partial,
                                  checksums=sums)
    index_storage.write_atomic(index_path, [header, body])
    return BuildResult(
        storage.url(path), index_storage.url(index_path), fmt, len(result.offsets),
        stamp.size, result.partial, result.problem, stamp.fingerprint,
    )
