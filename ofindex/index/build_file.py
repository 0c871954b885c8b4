"""Indexing one data file: detect its compression and framing, scan it once, write its sidecar.

A gzip/zlib file is inflated once, through :class:`~ofindex.deflate.stream.InflatedStream`:
its records' offsets are in the uncompressed stream and its sidecar also holds seek points.
"""


import contextlib
import dataclasses
import warnings
from collections.abc import Callable

from ..columns.collect import ColumnCollector, collect_mapped, write_columns
from ..deflate.stream import InflatedStream
from ..errors import OfindexError, StaleIndexError
from ..formats.detect import HEAD_BYTES, detect_layout
from ..formats.framing import RecordFormat
from ..formats.seekpoints import DEFAULT_SPACING
from ..formats.sidecar import decode_header, encode_sidecar
from ..formats.sidecar_header import Compression
from ..storage import FileStamp, Storage
from ..storage.identity import with_content
from ..storage.readahead import STREAM_CHUNK, ReadAhead
from .checksums import payload_checksums
from .scan import RecordSink, ScanResult, scan_file


@dataclasses.dataclass(frozen=True)
class BuildResult:
    """What the builder did for one data file.

    Attributes:
        data_url: The data file.
        index_url: The sidecar written.
        format: The record framing (an empty file takes its dataset's, else TFRecord).
        records: Records indexed.
        size: Data file size in bytes.
        partial: Only a valid prefix was indexed (``allow_partial=True``).
        problem: Why the index is partial.
        fingerprint: The data file's fingerprint when it was indexed.
        skipped: The sidecar was already fresh and left as it was (resumed build).
        compression: How the data file is compressed.
        uncompressed_size: Size of its decompressed stream (``size`` when not compressed).
        index_bytes: Size of the sidecar written.
        seek_points: Seek points in the sidecar (compressed files).
        body_crc: The sidecar's body CRC (which version of the sidecar this is, for the
            manifest), or ``None`` when no sidecar was written.
        content: The data file's content digest the sidecar stores (its identity: see
            :mod:`ofindex.storage.identity`), or ``None``.
        appended: The file grew since its sidecar was written: only the bytes it gained were
            scanned, and the sidecar grew by a segment (:mod:`ofindex.index.growth`).
        open_tail: The file was still being written: it ends inside a record, which the
            index leaves for the next build (``build_index(..., growing=True)``).
    """

    data_url: str
    index_url: str
    format: RecordFormat | None
    records: int
    size: int
    partial: bool = False
    problem: str | None = None
    fingerprint: str = ""
    skipped: bool = False
    compression: Compression = Compression.NONE
    uncompressed_size: int = -1
    index_bytes: int = 0
    seek_points: int = 0
    body_crc: int | None = None
    content: int | None = None
    appended: bool = False
    open_tail: bool = False

    @property
    def index_fraction(self) -> float:
        """The sidecar's size as a fraction of the data file's (0.0 for an empty file)."""
        return self.index_bytes / self.size if self.size else 0.0


def detect_file_layout(
    storage: Storage | ReadAhead, path: str, size: int, *,
    compression: Compression | None = None, fmt: RecordFormat | None = None,
) -> tuple[Compression, RecordFormat | None]:
    """Detect the compression and framing of one file from its first bytes (see
    :func:`~ofindex.formats.detect.detect_layout`; the framing is ``None`` when the
    decompressed stream is empty).

    Raises:
        FormatDetectionError: The first bytes fit no framing.
    """
    if fmt is not None and compression is not None:
        return compression, fmt
    head = storage.read_block(path, 0, HEAD_BYTES) if size else b""
    return detect_layout(head, size, path=storage.url(path), compression=compression, fmt=fmt)


def build_file(
    storage: Storage, path: str, fmt: RecordFormat | None, index_storage: Storage,
    index_path: str, verify: bool, allow_partial: bool,
    progress: Callable[[int], None] | None = None, *,
    compression: Compression | None = None, spacing: int = DEFAULT_SPACING,
    checksums: bool | None = None, expect: FileStamp | None = None,
    columns: tuple[str, ...] = (), open_tail: bool = False, sink: RecordSink | None = None,
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
        progress: Called with the number of bytes scanned (compressed bytes for a compressed
            file), now and then.
        compression: Its compression, or ``None`` to detect it.
        spacing: Uncompressed bytes between seek points of a compressed file.
        checksums: Also store the CRC32C of every payload in the sidecar (reads the whole
            file; see :mod:`ofindex.index.checksums`). ``None`` (the default): for OFRecord
            files, compressed or not, which carry no CRC of their own; TFRecord's own CRCs
            cover its payloads.
        expect: The file's stamp when its framing was detected (taken as its stamp: a file
            changed since is refused), or ``None`` to stat it now.
        columns: Features to store as column sidecars beside the sidecar (see
            :mod:`ofindex.columns`): their values are taken in the scan where it reads
            every byte (a remote or compressed file), else from a memory map of the file.
        open_tail: The file is still being written: data that ends inside a record ends the
            index before it (flagged open, for the next build to take up), and a file that
            grows while it is scanned is indexed as far as it was.
        sink: Sees every record as it is scanned (:class:`~.scan.RecordSink`).

    Returns:
        What was indexed.

    Raises:
        CorruptRecordError: Bad data (unless ``allow_partial``).
        ColumnError: A record holds several values of a column's feature, or records store
            it as different types.
        StaleIndexError: The file changed while it was scanned (or since ``expect``).
        FormatDetectionError: The compression or framing cannot be detected.
    """
    stamp = expect if expect is not None else storage.stamp(path)  # checked again at the end
    url = storage.url(path)
    # remote files stream once, in large sequential chunks with one chunk in flight
    source = storage if storage.is_local else ReadAhead(storage, path, stamp.size, STREAM_CHUNK)
    table, windows, usize = None, b"", stamp.size
    streamed: int | None = None  # the content digest, from a remote file's streamed regions
    try:
        compression, fmt = detect_file_layout(source, path, stamp.size,
                                              compression=compression, fmt=fmt)
        if fmt is None:  # an empty stream: zero records of either framing
            fmt = RecordFormat.TFRECORD
        want_sums = fmt is RecordFormat.OFRECORD if checksums is None else checksums
        # where the scan reads every byte anyway (a stream, a remote file) it sums them too
        mapped = compression is Compression.NONE and storage.is_local
        sums_in_scan = want_sums and not mapped
        collector = ColumnCollector(columns, fmt, url) if columns and not mapped else None
        hook = None if collector is None else collector.add
        # the scan warns of a partial index, which the caller reports from BuildResult.problem;
        # catch_warnings is process-wide and not thread-safe (overlapping ones on the build's
        # threads can leave "ignore" behind), so only a partial build enters it
        with warnings.catch_warnings() if allow_partial else contextlib.nullcontext():
            if allow_partial:
                warnings.simplefilter("ignore")
            if compression is Compression.NONE:
                result = scan_file(source, path, fmt, stamp.size, verify=verify,
                                   allow_partial=allow_partial, progress=progress,
                                   checksums=sums_in_scan, on_records=hook,
                                   open_tail=open_tail, sink=sink)
            else:
                stream = InflatedStream(source, path, stamp.size, compression, spacing,
                                        progress)
                result = scan_file(stream, path, fmt, 0, verify=verify,
                                   allow_partial=allow_partial, checksums=sums_in_scan,
                                   on_records=hook, open_tail=open_tail, sink=sink)
                table, windows = stream.seek_table()
                table = table[table["out"] <= result.indexed_end]  # past a damaged end: none
                usize = stream.end if stream.end is not None else result.indexed_end
        sums = result.checksums
        if want_sums and not sums_in_scan:  # a local file: a second pass on threads
            sums = payload_checksums(path, url, fmt, result.offsets, result.indexed_end)
        values = (collector.finish(len(result.offsets)) if collector is not None else
                  collect_mapped(path, url, fmt, result.offsets, result.indexed_end, columns)
                  if columns else [])
    except OfindexError:
        if expect is not None:  # a file that changed since it was looked at: say so
            check_unchanged(storage, path, stamp, storage.stamp(path))
        raise
    finally:
        if isinstance(source, ReadAhead):
            streamed = source.content_digest()
            source.close()
    # the content digest travels with every copy of the file (its identity): taken before the
    # last look at its stamp, so that a file changed meanwhile is refused, not misdescribed
    stamp = with_content(storage, path, stamp, streamed)
    now = storage.stamp(path)
    if not (open_tail and now.size >= stamp.size):  # a file written on: indexed as it was
        check_unchanged(storage, path, stamp, now)
    header, body = encode_sidecar(
        fmt, result.offsets, stamp, result.indexed_end, result.partial,
        compression=compression, seek_points=table, windows=windows,
        spacing=spacing if table is not None else 0, uncompressed_size=usize, checksums=sums,
        open_tail=result.open_tail,
    )
    index_storage.write_atomic(index_path, [header, body])
    body_crc = decode_header(header, path=index_storage.url(index_path)).body_crc
    write_columns(index_storage, index_path, columns, values, body_crc)
    built = _result(url, index_storage.url(index_path), fmt, result, stamp, compression, usize,
                    len(header) + len(body), 0 if table is None else len(table))
    return dataclasses.replace(built, body_crc=body_crc)


def check_unchanged(storage: Storage, path: str, stamp: FileStamp, now: FileStamp) -> None:
    """Refuse a file whose stamp changed while it was indexed (``stamp`` then, ``now``).

    Raises:
        StaleIndexError: It changed.
    """
    why = stamp.mismatch(now)
    if why:
        raise StaleIndexError(
            f"{storage.url(path)}: the file changed while it was being indexed ({why}); "
            "run `ofindex build` again once writing has finished"
        )


def _result(url: str, index_url: str, fmt: RecordFormat, scan: ScanResult, stamp: FileStamp,
            compression: Compression, usize: int, index_bytes: int,
            points: int) -> BuildResult:
    return BuildResult(url, index_url, fmt, len(scan.offsets), stamp.size, scan.partial,
                       scan.problem, stamp.fingerprint, compression=compression,
                       uncompressed_size=usize, index_bytes=index_bytes, seek_points=points,
                       content=stamp.content, open_tail=scan.open_tail)
