"""Columns added to a shard whose sidecar is fresh: its records read once more, its sidecar
left as it is.

A build with ``columns=`` over files indexed before (without those columns, or before a
crash between a sidecar and its columns) keeps each fresh sidecar and writes only the column
sidecars that are missing or stale (built for another version of the sidecar). A local
uncompressed file is read through a memory map at its sidecar's offsets; a remote or
compressed one is streamed once more through the scan, whose records must be the ones its
sidecar indexes.
"""

from __future__ import annotations

from collections.abc import Callable

from ..columns.collect import ColumnCollector, collect_mapped, write_columns
from ..columns.column_file import (
    FIXED_HEADER,
    column_path,
    decode_column_header,
    header_size_of,
)
from ..columns.extract import Extracted
from ..deflate.stream import InflatedStream
from ..errors import SidecarError, StaleIndexError
from ..formats.framing import RecordFormat
from ..formats.seekpoints import DEFAULT_SPACING
from ..formats.sidecar import load_sidecar
from ..formats.sidecar_header import Compression
from ..storage import Storage
from ..storage.readahead import STREAM_CHUNK, ReadAhead
from .build_file import BuildResult
from .scan import scan_file


def column_is_fresh(index_storage: Storage, index_path: str, column: str, records: int,
                    body_crc: int | None) -> bool:
    """Whether the column sidecar of ``column`` beside ``index_path`` describes the records
    of the sidecar whose body CRC is ``body_crc`` (a missing, damaged or stale one is not).

    Args:
        index_storage: Storage of the sidecar.
        index_path: The sidecar.
        column: The column.
        records: The sidecar's record count.
        body_crc: The sidecar's body CRC.

    Returns:
        Whether it is fresh (read: its header, one request).
    """
    path = column_path(index_path, column)
    try:
        head = index_storage.read(path, 0, FIXED_HEADER)
        size = header_size_of(head, index_storage.url(path))
        if size > len(head):
            head += index_storage.read(path, FIXED_HEADER, size)
        header = decode_column_header(head, index_storage.url(path), 1 << 62)
    except (FileNotFoundError, SidecarError, OSError, ValueError):
        return False
    return header.name == column and header.count == records and header.body_crc == body_crc


def add_columns(storage: Storage, path: str, index_storage: Storage, index_path: str,
                columns: tuple[str, ...], existing: BuildResult,
                progress: Callable[[int], None] | None = None) -> None:
    """Write the column sidecars of ``columns`` that are missing or stale beside a fresh
    sidecar.

    Args:
        storage: Storage of the data file.
        path: The data file.
        index_storage: Storage of its sidecar.
        index_path: The sidecar.
        columns: The columns asked for.
        existing: What the fresh sidecar says (its record count, format, compression, body
            CRC).
        progress: Called with the number of bytes read, now and then.

    Raises:
        StaleIndexError: The file's records are not the ones its sidecar indexes any more.
        ColumnError, DecodeError: As the extraction of the columns.
    """
    wanted = tuple(c for c in columns if not column_is_fresh(
        index_storage, index_path, c, existing.records, existing.body_crc))
    if not wanted or existing.body_crc is None:
        return
    fmt = existing.format or RecordFormat.TFRECORD
    url = storage.url(path)
    if existing.compression is Compression.NONE and storage.is_local:
        sidecar = load_sidecar(index_storage, index_path)
        values = collect_mapped(path, url, fmt, sidecar.offsets, sidecar.indexed_end, wanted)
        if progress is not None:
            progress(existing.size)
    else:
        values = _streamed(storage, path, fmt, existing, wanted, progress)
    write_columns(index_storage, index_path, wanted, values, existing.body_crc)


def _streamed(storage: Storage, path: str, fmt: RecordFormat, existing: BuildResult,
              wanted: tuple[str, ...], progress: Callable[[int], None] | None
              ) -> list[Extracted]:
    """The columns of a remote or compressed file, its records streamed through the scan."""
    url = storage.url(path)
    collector = ColumnCollector(wanted, fmt, url)
    source: Storage | ReadAhead = (
        storage if storage.is_local else ReadAhead(storage, path, existing.size, STREAM_CHUNK))
    try:
        if existing.compression is Compression.NONE:
            result = scan_file(source, path, fmt, existing.size, progress=progress,
                               on_records=collector.add)
        else:
            stream = InflatedStream(source, path, existing.size, existing.compression,
                                    DEFAULT_SPACING, progress)
            result = scan_file(stream, path, fmt, 0, on_records=collector.add)
    finally:
        if isinstance(source, ReadAhead):
            source.close()
    if len(result.offsets) != existing.records:
        raise StaleIndexError(
            f"{url}: holds {len(result.offsets)} records, its index {existing.records}; the "
            "file changed since it was indexed: run `ofindex build --force` on it")
    return collector.finish(existing.records)
