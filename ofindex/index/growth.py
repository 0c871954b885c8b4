"""Indexing a data file that grew since its sidecar was written: only the bytes it gained.

A file *grew* when it is longer than its index says and its first bytes are the ones indexed
(:func:`ofindex.storage.identity.not_appended`: the content digest the sidecar stores,
computed again over the indexed size; anything else, a shorter file or other first bytes, is
another file and is indexed whole). Then only what follows the indexed end is read:

* an uncompressed file is scanned from the indexed end;
* a GZIP or ZLIB file is inflated from its last seek point at or before the indexed end (a
  stream that goes on, or new members or streams appended after its end), the scan starting
  at the indexed end, seek points placed after the last one as a build places them;
* a remote file is streamed from there the same way (:class:`ReadAhead`).

What the growth adds is written as a growth segment after the sidecar's last byte
(:mod:`ofindex.formats.sidecar_growth`): appended in place to a local sidecar, locked against
another process growing it at once; a remote sidecar (an object store cannot append) is
written again whole, its old bytes unchanged before the segment. Either way a reader sees the
old index or the grown one, and one that expects the old state (a manifest written before)
still finds it. After :data:`MAX_SEGMENTS` segments the sidecar is written whole again, with
none (*compacted*).

A file still being written (``open_tail``: TensorBoard's event files, a collector's output)
may end inside a record: the index then ends before it, flagged open, and the next growth
takes it up.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterator

import numpy as np

from ..deflate.inflate import can_prime
from ..deflate.stream import InflatedStream, StartPoint
from ..errors import SidecarError, StaleIndexError
from ..formats.seekpoints import DEFAULT_SPACING, SEEK_DTYPE, empty_table
from ..formats.sidecar import Sidecar, encode_sidecar, load_sidecar
from ..formats.sidecar_growth import Growth, encode_segment, segments_start
from ..formats.sidecar_header import Compression, SidecarHeader, decode_header
from ..storage import FileStamp, Storage
from ..storage.identity import not_appended, with_content
from ..storage.readahead import STREAM_CHUNK, ReadAhead
from .build_file import BuildResult, check_unchanged
from .scan import RecordSink, scan_file

#: Growth segments a sidecar may hold before it is written whole again. Each costs a header
#: of about 160 bytes and, when the sidecar is opened, a parse and a copy of its records
#: (a sidecar with segments is read into memory, not mapped); 16 keep a sidecar that grows
#: every minute for a quarter of an hour between compactions.
MAX_SEGMENTS = 16

try:  # POSIX: a growing sidecar is locked while a segment is appended
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - Windows: appends are not locked
    _fcntl = None  # type: ignore[assignment]


def scan_growth(storage: Storage, path: str, sidecar: Sidecar, current: FileStamp, *,
                verify: bool = False, open_tail: bool = False,
                progress: Callable[[int], None] | None = None,
                sink: RecordSink | None = None) -> Growth:
    """Index what ``path`` gained since ``sidecar`` was written (the caller checked that it
    grew: :func:`~ofindex.storage.identity.not_appended`).

    Args:
        storage: Storage of the data file.
        path: The data file.
        sidecar: Its index (its last state).
        current: The file's stamp now: what is scanned (bytes written after it are left to
            the next growth).
        verify: Also check the new records' payload CRCs.
        open_tail: The file is still being written: data that ends inside a record is a
            record not yet whole (the index ends before it, flagged open).
        progress: Called with the bytes scanned, now and then.
        sink: Sees every new record as it is scanned (:class:`~.scan.RecordSink`).

    Returns:
        The growth: the new records' offsets (and checksums when the sidecar keeps them),
        the seek points placed after the last one, and the grown index's header (its body
        CRC still the old one: :func:`write_growth` chains it).

    Raises:
        CorruptRecordError: Bad data after the indexed end (a record cut short too, unless
            ``open_tail``).
    """
    h = sidecar.header
    sums = sidecar.checksums is not None
    source = storage if storage.is_local else ReadAhead(storage, path, current.size,
                                                        STREAM_CHUNK)
    points, windows = empty_table(), b""
    try:
        if h.compression is Compression.NONE:
            result = scan_file(source, path, h.format, current.size, verify=verify,
                               checksums=sums, start=h.indexed_end, first_record=h.count,
                               open_tail=open_tail, progress=progress, sink=sink)
            usize = current.size
        else:
            stream = InflatedStream(source, path, current.size, h.compression,
                                    h.spacing or DEFAULT_SPACING, progress,
                                    start=_resume_point(sidecar))
            result = scan_file(stream, path, h.format, 0, verify=verify, checksums=sums,
                               start=h.indexed_end, first_record=h.count,
                               open_tail=open_tail, sink=sink)
            table, blob = stream.seek_table()
            points, windows = _points_after(table[table["out"] <= result.indexed_end], blob,
                                            int(sidecar.seek_points["out"][-1]))
            usize = stream.end if stream.end is not None else result.indexed_end
    finally:
        if isinstance(source, ReadAhead):
            source.close()
    # the digest of the file as long as it was scanned (its bytes never change once written)
    stamp = with_content(storage, path, current)
    header = dataclasses.replace(
        h, count=h.count + len(result.offsets), stamp=stamp, indexed_end=result.indexed_end,
        uncompressed_size=usize, seek_points=h.seek_points + len(points),
        windows_bytes=h.windows_bytes + len(windows), open_tail=result.open_tail)
    return Growth(header, result.offsets, result.checksums if sums else None, points,
                  windows)


def _resume_point(sidecar: Sidecar) -> StartPoint:
    """Where inflating resumes: the last seek point at or before the indexed end (the last
    one that starts on a byte without a window, when no compiled inflater can prime)."""
    seeks = sidecar.seeks
    k = seeks.point_before(sidecar.indexed_end)
    if not can_prime():
        k = seeks.aligned_before(k)
    return StartPoint(int(seeks.kind[k]), int(seeks.in_[k]), int(seeks.bits[k]),
                      seeks.window(k), int(seeks.out[k]))


def _points_after(table: np.ndarray, blob: bytes, last_out: int) -> tuple[np.ndarray, bytes]:
    """The seek points of a resumed inflate that lie after the index's last point, with their
    windows cut out of ``blob`` (``window_at`` rebased on the new blob)."""
    kept = np.array(table[table["out"] > last_out], dtype=SEEK_DTYPE)
    parts: list[bytes] = []
    at = 0
    for k in range(len(kept)):
        length = int(kept["window_len"][k])
        start = int(kept["window_at"][k])
        parts.append(blob[start : start + length])
        kept["window_at"][k] = at
        at += length
    return kept, b"".join(parts)


def grown_file(storage: Storage, path: str, index_storage: Storage, index_path: str,
               current: FileStamp,
               asked: Callable[[SidecarHeader], bool] | None = None) -> Sidecar | None:
    """The sidecar of ``path`` when the file only grew since it was written (its first bytes
    are the ones indexed) and the index can grow with it, else ``None`` (index it whole).

    An index that cannot grow: none, unreadable, version 1, or partial (damaged data).

    Args:
        storage: Storage of the data file.
        path: The data file.
        index_storage: Storage of the sidecar.
        index_path: The sidecar.
        current: The data file's stamp now.
        asked: Whether the sidecar is what the build asks for (else it is built whole).

    Returns:
        The sidecar (as of its last state), or ``None``.
    """
    try:
        sidecar = load_sidecar(index_storage, index_path)
    except (OSError, SidecarError, ValueError):
        return None
    h = sidecar.header
    if h.version == 1 or h.partial or (asked is not None and not asked(h)):
        return None
    if not_appended(storage, path, h.stamp, current) is not None:
        return None
    return sidecar


def write_growth(index_storage: Storage, index_path: str, sidecar: Sidecar,
                 growth: Growth) -> tuple[int, int]:
    """Record ``growth`` in the sidecar ``sidecar`` was read from: a growth segment appended
    (see the module), or the whole grown sidecar written again once it holds
    :data:`MAX_SEGMENTS`.

    Args:
        index_storage: Storage of the sidecar.
        index_path: The sidecar.
        sidecar: What it held when read.
        growth: What to add (:func:`scan_growth`).

    Returns:
        The grown sidecar's body CRC (its version, for the manifest) and its size.

    Raises:
        StaleIndexError: The sidecar changed since it was read (another process grew or
            rebuilt it meanwhile): nothing is written.
        StorageError: It cannot be written.
    """
    if len(sidecar.segments) >= MAX_SEGMENTS:
        return _write_whole(index_storage, index_path, sidecar.extended(growth))
    segment, body_crc = encode_segment(sidecar.base, sidecar.header, growth)
    end = sidecar.complete_end
    pad = bytes(segments_start(end) - end)
    if index_storage.is_local:
        append_local(index_path, len(sidecar.raw), end, pad + segment)
    else:  # an object cannot grow: the old bytes, unchanged, and the segment after them
        index_storage.write_atomic(index_path, [memoryview(sidecar.raw)[:end], pad, segment])
    return body_crc, segments_start(end) + len(segment)


def _write_whole(index_storage: Storage, index_path: str, grown: Sidecar) -> tuple[int, int]:
    """Write a grown sidecar whole, without segments (compacted)."""
    h = grown.header
    header, body = encode_sidecar(
        h.format, grown.offsets, h.stamp, h.indexed_end, checksums=grown.checksums,
        compression=h.compression, seek_points=grown.seek_points if grown.compressed else None,
        windows=bytes(grown.windows), spacing=h.spacing, uncompressed_size=h.uncompressed_size,
        packed=h.packed, open_tail=h.open_tail)
    index_storage.write_atomic(index_path, [header, body])
    return decode_header(header, path=index_storage.url(index_path)).body_crc, (
        len(header) + len(body))


def append_local(path: str, seen: int, end: int, data: bytes) -> None:
    """Append ``data`` at byte ``end`` of the local index file ``path`` (a sidecar, or
    another index that grows the same way; it was ``seen`` bytes long when read, and what lies
    after ``end`` is a part a writer did not finish), under an exclusive lock.

    Not flushed to the disk (``fsync``: about 4 ms a file, most of a refresh of a log of many
    files): what is appended is checked by its CRCs, so a power loss that leaves it torn or
    zeroed makes the index refused, never misread, and the next build writes it again whole.

    Args:
        path: The index file.
        seen: Its size when it was read.
        end: Where its last whole part ends.
        data: What to append there.

    Raises:
        StaleIndexError: The file is another one now, or grew since it was read.
    """
    fd = os.open(path, os.O_RDWR)
    try:
        with _locked(fd):
            if os.fstat(fd).st_ino != os.stat(path).st_ino or os.fstat(fd).st_size != seen:
                raise StaleIndexError(
                    f"{path}: the index changed while it was being extended (another build "
                    "of the same file?); run the build again")
            if seen > end:
                os.ftruncate(fd, end)  # a segment whose writer died: never part of the index
            written = os.pwrite(fd, data, end)
            if written != len(data):
                raise OSError(f"{path}: wrote {written} of {len(data)} bytes")
    finally:
        os.close(fd)


@contextlib.contextmanager
def _locked(fd: int) -> Iterator[None]:
    if _fcntl is None:  # pragma: no cover
        yield
        return
    _fcntl.flock(fd, _fcntl.LOCK_EX)
    try:
        yield
    finally:
        _fcntl.flock(fd, _fcntl.LOCK_UN)


def extend_file(storage: Storage, path: str, index_storage: Storage, index_path: str, *,
                stamp: FileStamp | None = None, open_tail: bool = False,
                progress: Callable[[int], None] | None = None,
                asked: Callable[[SidecarHeader], bool] | None = None,
                sink: RecordSink | None = None) -> BuildResult | None:
    """Index only what ``path`` gained, when it grew since its sidecar was written (see the
    module), and grow the sidecar; ``None`` when it did not (index it whole).

    Args:
        storage: Storage of the data file.
        path: The data file.
        index_storage: Storage of the sidecar.
        index_path: The sidecar.
        stamp: The file's stamp when the build first looked at it, or ``None`` to stat it.
        open_tail: The file is still being written (see :func:`scan_growth`); a file that
            grows further while it is scanned is then indexed as far as ``stamp`` (else it is
            refused as changed while indexed).
        progress: Called with the bytes scanned, now and then.
        asked: Whether the existing sidecar is what the build asks for (else ``None``).
        sink: Sees every new record as it is scanned (:class:`~.scan.RecordSink`).

    Returns:
        What the grown index holds (``appended=True``), or ``None``.

    Raises:
        CorruptRecordError: Bad data after the indexed end.
        StaleIndexError: The file or its sidecar changed while it was indexed.
    """
    current = stamp if stamp is not None else storage.stamp(path)
    sidecar = grown_file(storage, path, index_storage, index_path, current, asked)
    if sidecar is None:
        return None
    growth = scan_growth(storage, path, sidecar, current, open_tail=open_tail,
                         progress=progress, sink=sink)
    now = storage.stamp(path)
    if open_tail and now.size >= current.size:
        pass  # written on meanwhile: indexed as far as it was (the bytes never change)
    else:
        check_unchanged(storage, path, growth.header.stamp, now)
    body_crc, index_bytes = write_growth(index_storage, index_path, sidecar, growth)
    h = growth.header
    return BuildResult(
        storage.url(path), index_storage.url(index_path), h.format, h.count, h.stamp.size,
        fingerprint=h.stamp.fingerprint, compression=h.compression,
        uncompressed_size=h.uncompressed_size, index_bytes=index_bytes,
        seek_points=h.seek_points, body_crc=body_crc, content=h.stamp.content, appended=True,
        open_tail=h.open_tail)
