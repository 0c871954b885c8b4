"""Indexing one TensorBoard event file: its sidecar and its events index in one scan, only
what the file gained since when it grew (:mod:`ofindex.index.growth`).

The events index follows the sidecar: it covers the sidecar's records (each chunk names the
sidecar state it goes with). When the sidecar has records the events index lacks (it grew by
another build, or the events index was removed), those records are read again through it;
when the file was indexed whole again (replaced), so is its events index.
"""

from __future__ import annotations

import dataclasses
import mmap
import os

import numpy as np

from ..errors import SidecarError
from ..formats.framing import RecordFormat
from ..formats.sidecar import Sidecar, load_sidecar
from ..formats.sidecar_header import Compression
from ..index.build_file import BuildResult
from ..index.growth import append_local
from ..index.job import FileJob
from ..storage import Storage
from . import index_file
from .decoding import EventSink, Tags
from .index_file import Chunk


@dataclasses.dataclass(frozen=True)
class EventFile:
    """Where one event file and its indexes are.

    Attributes:
        storage: Storage of the event file.
        path: The event file.
        index_storage: Storage of its indexes.
        sidecar: Its sidecar's path.
        events: Its events index's path.
    """

    storage: Storage
    path: str
    index_storage: Storage
    sidecar: str
    events: str


@dataclasses.dataclass(frozen=True)
class Indexed:
    """An event file's events index as read (or written): its chunks, and its bytes' size.

    Attributes:
        chunks: The whole chunks, in order.
        size: The index file's size when read (``-1``: there is none).
    """

    chunks: list[Chunk]
    size: int

    @property
    def records(self) -> int:
        """The event file's records it covers."""
        return self.chunks[-1].records if self.chunks else 0

    @property
    def end(self) -> int:
        """Where its last whole chunk ends."""
        return self.chunks[-1].end if self.chunks else index_file.HEADER_BYTES

    def tags(self) -> list[tuple[str, str]]:
        """``(name, plugin)`` of its tags, in number order."""
        return [tag for chunk in self.chunks for tag in chunk.tags]


def read_events(index_storage: Storage, path: str) -> Indexed:
    """The events index at ``path`` (none: no chunks, size ``-1``): memory-mapped when local
    (a tag's entries are read when asked for), else fetched whole.

    Raises:
        SidecarError: It is corrupt.
    """
    try:
        raw = _mapped(path) if index_storage.is_local else index_storage.read_all(path)
    except FileNotFoundError:
        return Indexed([], -1)
    return Indexed(index_file.parse(raw, path=index_storage.url(path)), len(raw))


def _mapped(path: str) -> mmap.mmap | bytes:
    """A local file's bytes, memory-mapped (an empty file: no bytes)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        return mmap.mmap(fd, size, access=mmap.ACCESS_READ) if size else b""
    finally:
        os.close(fd)


def index_events(file: EventFile, known: Indexed | None = None) -> tuple[BuildResult, Indexed]:
    """Bring ``file``'s sidecar and events index up to date (see the module): nothing to do
    when the file did not change, only its new records when it grew.

    Args:
        file: The event file and its indexes.
        known: Its events index as last read or written here: taken as it is when the index
            file has its size still (else read again).

    Returns:
        The sidecar's build result, and the events index now.

    Raises:
        CorruptRecordError: The file is damaged (a record cut short at its end is one still
            being written, left for a later call).
    """
    indexed = _current(file, known)
    tags = Tags(indexed.tags())
    sink = EventSink(tags, lambda at, n: file.storage.read(file.path, at, at + n))
    job = FileJob(file.storage, file.path, RecordFormat.TFRECORD, file.index_storage,
                  file.sidecar, compression=Compression.NONE, open_tail=True, sink=sink)
    result = job.run(True)
    count = result.records
    first = count if sink.first is None else sink.first  # what the scan saw: [first, count)
    entries = sink.finish(count)
    whole = not result.appended and not result.skipped  # indexed whole: so is its events
    current = bool(indexed.chunks) and indexed.chunks[-1].sidecar_crc == result.body_crc
    if whole or indexed.records > first or (result.skipped and indexed.records == count
                                            and indexed.chunks and not current):
        if not whole:  # the events index does not go with the sidecar: made again
            tags = Tags([])
            entries = _decode(file, tags, 0, count)
        indexed, first = Indexed([], indexed.size), 0
        tags.first_new = 0  # a new index names every tag (the scan numbered them so)
    elif indexed.records < first:  # records the sidecar has and the events index lacks
        entries = np.concatenate([_decode(file, tags, indexed.records, first), entries])
        first = indexed.records
    if first == count and indexed.chunks:
        return result, indexed  # nothing new
    chunk = index_file.encode_chunk(first, count, result.body_crc or 0, tags.new(), entries)
    return result, _write(file, indexed, chunk)


def _current(file: EventFile, known: Indexed | None) -> Indexed:
    """The events index now: ``known`` when its file did not change (a stat), else read."""
    if known is not None and known.size >= 0:
        try:
            if file.index_storage.stamp(file.events).size == known.size:
                return known
        except FileNotFoundError:
            return Indexed([], -1)
    try:
        return read_events(file.index_storage, file.events)
    except SidecarError:
        return Indexed([], -1)  # unreadable: made again


def _decode(file: EventFile, tags: Tags, start: int, stop: int) -> np.ndarray:
    """The entries of records ``[start, stop)``, read through the file's sidecar."""
    sink = EventSink(tags)
    if stop <= start:
        return sink.finish(stop)
    sidecar: Sidecar = load_sidecar(file.index_storage, file.sidecar)
    starts, ends = sidecar.spans(np.arange(start, stop, dtype=np.int64))
    paths = [file.path] * len(starts)
    payloads = file.storage.read_ranges(paths, (starts + 12).tolist(), (ends - 4).tolist())
    for k, payload in enumerate(payloads):
        sink.event(bytes(payload), start + k)
    return sink.finish(stop)


def _write(file: EventFile, indexed: Indexed, chunk: bytes) -> Indexed:
    """Add ``chunk`` to the events index (a new index when it has no chunk), and read it
    back."""
    storage, path = file.index_storage, file.events
    if indexed.chunks and storage.is_local:
        append_local(path, indexed.size, indexed.end, chunk)
    elif indexed.chunks:  # an object cannot grow: its old bytes, then the chunk
        storage.write_atomic(path, [storage.read(path, 0, indexed.end), chunk])
    else:
        storage.write_atomic(path, [index_file.header(), chunk])
        indexed = Indexed([], index_file.HEADER_BYTES)
    # what was written, read back from the bytes at hand (not the whole index again)
    added = index_file.parse_chunk(chunk, 0, indexed.records, len(indexed.tags()),
                                   path=storage.url(path))
    assert added is not None
    at = indexed.end
    added = dataclasses.replace(added, end=at + added.end)
    return Indexed([*indexed.chunks, added], at + len(chunk))
