"""Writers that frame records and emit the sidecar as they write (no scan needed later)."""


import array
import contextlib
import os
import secrets
from collections.abc import Iterable
from types import TracebackType
from typing import Any, Protocol

import numpy as np
from crc32c import crc32c as _crc32c

from ..deflate.sink import DeflateSink
from ..errors import OfindexError, hint
from ..formats.framing import RecordFormat, frame_parts
from ..formats.location import sidecar_location
from ..formats.seekpoints import WRITER_SPACING
from ..formats.sidecar import encode_sidecar
from ..formats.sidecar_header import Compression
from ..storage import FileStamp, LocalStorage, Storages
from ..storage.identity import with_content
from ..storage.local import no_space
from .appending import Appending, open_for_append


def temporary_name(path: str) -> str:
    """The name a local file is written under before it is renamed into place: hidden, and
    free of the file's own name, so that no glob for data files (``*.tfrecord*``,
    ``part-*``, ``*-of-*``: ``tf.io.gfile`` and fsspec match hidden names too) lists it,
    even when a killed writer leaves it behind. A name that is hidden already (a
    :class:`~ofindex.write.ShardedWriter`'s shard, which carries the writer's token) keeps
    it, with the process id added.

    Args:
        path: The file's final path.

    Returns:
        The temporary path, in the same directory.
    """
    directory, name = os.path.split(path)
    if name.startswith("."):
        return f"{path}.{os.getpid()}.tmp"
    return os.path.join(directory, f".ofindex-{os.getpid()}-{secrets.token_hex(4)}.tmp")


class _Message(Protocol):
    def SerializeToString(self) -> bytes: ...


class Writer:
    """Write a TFRecord or OFRecord file and its sidecar index at once (no scan needed later).

    >>> with Writer("train-00000.tfrecord") as w:          # doctest: +SKIP
    ...     w.write(b"raw bytes")
    ...     w.write(example)                                # any protobuf message

    Args:
        url: The data file to write: a local path or a URL (``s3://…`` through fsspec).
        format: ``"tfrecord"`` or ``"ofrecord"``.
        index: Write the sidecar when the file is closed.
        index_dir: Where the sidecar goes. By default: where the file's sidecar already is,
            else its directory's index directory ``<dir>.ofindex/`` when that exists, else
            (a local file) the per-user index cache, so that no directory is created next to
            one the caller did not name (see :func:`ofindex.formats.placement.new_index_layout`).
        storage_options: Options for the fsspec filesystem.
        compression: ``"gzip"`` or ``"zlib"`` writes what ``tf.io.TFRecordWriter`` with
            ``TFRecordOptions(compression_type="GZIP" | "ZLIB")`` writes (TensorFlow reads
            it); ``None`` writes an uncompressed file.
        seek_spacing: Uncompressed bytes between the seek points of a compressed file
            (placed by full flushes, so the sidecar needs no windows).
        compression_level: zlib's level (-1: zlib's default, as TensorFlow).
        checksums: Store the CRC32C of every payload in the sidecar; reads with
            ``verify=True`` check them. ``None`` (the default): on for OFRecord, compressed
            or not, which has no CRC of its own (a payload changed in place would otherwise
            read back as data, and a compressed file's gzip CRC is only checked by a pass over
            all of it), off for TFRecord, whose framing carries CRCs. It costs one hardware
            CRC32C per record and 4 bytes per record in the sidecar.
        append: Add records after those of an existing file (created when missing), written
            in place: readers that follow the file (:meth:`ofindex.Dataset.follow`) see them
            as they are flushed (:meth:`flush`), and :meth:`close` grows its sidecar by the
            records written without rewriting it (a growth segment). The file is indexed
            first when its sidecar is missing or stale; its compression is kept (a compressed
            file gains a gzip member or zlib stream) and so are its sidecar's checksums. On
            an object store, which cannot append, :meth:`close` uploads the file again whole.
            One appender at a time: another ``Writer(..., append=True)`` of a local file is
            refused while one is open.

    Raises:
        ValueError: An unknown ``format`` or ``compression``.
        StorageError: The storage cannot be reached or refuses the write, or the disk is full
            (then with ``errno`` ``ENOSPC``, here and from every method: the unfinished
            file is removed, and a previous file of that name and its index are as they
            were).
        OfindexError: With ``append``: another writer appends to the file, it is of another
            framing or compression than asked for, or it ends inside a record.

    Local files are written under a hidden temporary name (:func:`temporary_name`) that no
    data glob lists; a clean :meth:`close` writes the sidecar under a temporary name too,
    then renames the file into place and its sidecar after it: a writer that fails or dies
    midway leaves any previous file untouched, and readers that have the old file open (or
    memory-mapped) keep reading it. On object stores the upload is published by
    :meth:`close` anyway; there an existing sidecar of the target is removed first, so a writer
    that dies midway leaves no sidecar claiming records the data file lacks. Offsets are kept
    in memory (8 bytes per record).

    ``compression="gzip"`` or ``"zlib"`` writes what ``tf.io.TFRecordWriter`` with
    ``TFRecordOptions(compression_type="GZIP" | "ZLIB")`` writes (TensorFlow reads it), at
    zlib level ``compression_level`` (-1: zlib's default, as TensorFlow), with seek points
    every ``seek_spacing`` uncompressed bytes (default 256 KiB) placed by full flushes (see
    :mod:`ofindex.deflate.sink`): the sidecar needs no windows and no scan later.
    """

    def __init__(
        self,
        url: str | os.PathLike[str],
        format: str | RecordFormat = "tfrecord",
        *,
        index: bool = True,
        index_dir: str | None = None,
        storage_options: dict[str, Any] | None = None,
        compression: str | Compression | None = None,
        seek_spacing: int = WRITER_SPACING,
        compression_level: int = -1,
        checksums: bool | None = None,
        append: bool = False,
    ) -> None:
        self.format = RecordFormat.parse(format)
        self.compression = Compression.parse(compression)
        if checksums is None:
            checksums = self.format is RecordFormat.OFRECORD
        self._crcs = array.array("I") if checksums and index else None
        storages = Storages(storage_options)
        self._index_dir, self._storage_options = index_dir, storage_options
        self._storage, self._path = storages.for_url(os.fspath(url))
        self._index = index
        self._index_storage, self._index_path = sidecar_location(
            self._storage, self._path, index_dir, storages
        )
        self._url = self._storage.url(self._path)
        self._tmp = (temporary_name(self._path) if isinstance(self._storage, LocalStorage)
                     and not append else None)
        self._placed = False  # the temporary file was renamed into place
        self._staged: str | None = None  # the sidecar, written ahead under a temporary name
        self._closed = False
        self._offsets = array.array("Q")
        self._pos = 0
        #: The existing file appended to (``append``), or ``None``.
        self._appending = (self._open_for_append(compression, checksums) if append
                           else None)
        if index and self._tmp is None and self._appending is None:
            self._index_storage.remove(self._index_path)
        try:
            self._file = (self._appending.open() if self._appending is not None
                          else self._storage.open_write(self._tmp or self._path))
        except BaseException as exc:  # an interrupt may land after the file was created
            if self._tmp is not None:
                self._storage.remove(self._tmp)
            if self._appending is not None:
                self._appending.release()
            full = no_space(self._url, exc, "nothing was written: free some space (or write "
                            "to another disk) and write it again")
            if full is not None:
                raise full from exc
            raise
        self._sink: DeflateSink | None = None
        if self.compression is not Compression.NONE:
            start = (0, 0) if self._appending is None else (self._pos,
                                                              self._appending.size)
            self._sink = DeflateSink(self._file, self.compression, seek_spacing,
                                     compression_level, start=start)

    def _open_for_append(self, compression: str | Compression | None,
                         checksums: bool | None) -> Appending:
        """Open the existing file for appending (an empty one made first when it is
        missing): its framing, compression and checksums are kept, writing goes on after its
        last record."""
        if not self._storage.exists(self._path):
            with Writer(self._url, self.format, index_dir=self._index_dir,
                        storage_options=self._storage_options, compression=compression,
                        checksums=checksums):
                pass  # an empty file and its index, for the records to follow
        appending = open_for_append(
            self._storage, self._path, self._index_storage, self._index_path, self.format,
            None if compression is None else self.compression,
            True if checksums else None)
        self.compression = appending.compression
        if not appending.checksums:
            self._crcs = None
        elif self._crcs is None:
            self._crcs = array.array("I")
        self._pos = appending.end
        return appending

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        comp = "" if self.compression is Compression.NONE else f", {self.compression.name.lower()}"
        return (f"Writer({self._storage.url(self._path)!r}, {self.format.name.lower()}{comp}, "
                f"{len(self._offsets)} records, {state})")

    def __len__(self) -> int:
        """Return the number of records written so far."""
        return len(self._offsets)

    def write(self, record: bytes | bytearray | memoryview | _Message) -> int:
        """Append one record.

        Args:
            record: The payload bytes, or a protobuf message (serialized here).

        Returns:
            The record's number in the file.

        Raises:
            OfindexError: The writer is closed.
            TypeError: ``record`` is neither bytes nor a protobuf message.
        """
        if self._closed:
            raise OfindexError(f"{self._storage.url(self._path)}: write() on a closed Writer")
        if isinstance(record, (bytes, bytearray, memoryview)):
            data: bytes | bytearray | memoryview = record
        else:
            serialize = getattr(record, "SerializeToString", None)
            if serialize is None:
                raise TypeError(
                    f"Writer.write takes bytes or a protobuf message, not {type(record).__name__}"
                )
            data = serialize()
        head, foot = frame_parts(data, self.format)
        f: Any = self._file
        try:
            if self._sink is not None:
                self._sink.boundary(self._pos)
                f = self._sink
            f.write(head)
            f.write(data)
            if foot:
                f.write(foot)
        except OSError as exc:
            self._out_of_space(exc)
            raise
        if self._crcs is not None:
            self._crcs.append(_crc32c(data))
        self._offsets.append(self._pos)
        self._pos += len(head) + len(data) + len(foot)
        return len(self._offsets) - 1

    def write_framed(self, block: bytes | bytearray | memoryview, sizes: np.ndarray,
                     crcs: np.ndarray) -> int:
        """Append records already framed for this writer's format, back to back in ``block``
        (what :func:`ofindex.encode.framed.encode_block` writes), in one write.

        Args:
            block: The framed records.
            sizes: Each record's framed size (int64); they add up to ``len(block)``.
            crcs: Each payload's CRC32C (uint32), kept when the sidecar holds checksums.

        Returns:
            How many records were written.

        Raises:
            OfindexError: The writer is closed.
            ValueError: ``sizes`` do not add up to the block, or ``crcs`` differ in count.
        """
        if self._closed:
            raise OfindexError(f"{self._storage.url(self._path)}: write() on a closed Writer")
        n = len(sizes)
        ends = np.cumsum(sizes, dtype=np.int64)
        total = int(ends[-1]) if n else 0
        if total != len(block) or len(crcs) != n or (n and int(sizes.min()) <
                                                      self.format.overhead):
            raise ValueError(f"{n} framed records of {total} bytes in a block of {len(block)} "
                             f"with {len(crcs)} CRCs")
        starts = ends - sizes + self._pos
        try:
            if self._sink is None:
                self._file.write(block)
            else:
                self._compress_framed(memoryview(block), starts)
        except OSError as exc:
            self._out_of_space(exc)
            raise
        self._offsets.frombytes(starts.astype(np.uint64).tobytes())
        if self._crcs is not None:
            self._crcs.frombytes(crcs.astype(np.uint32).tobytes())
        self._pos += total
        return n

    def _compress_framed(self, block: memoryview, starts: np.ndarray) -> None:
        """A block through the compressor, cut at the records where a seek point is due
        (where :meth:`write`, record by record, places them)."""
        sink = self._sink
        assert sink is not None
        base, at = int(starts[0]), 0
        while True:
            k = int(np.searchsorted(starts, sink.next_point))
            if k >= len(starts):
                break
            cut = int(starts[k]) - base
            sink.write(block[at:cut])
            sink.boundary(int(starts[k]))
            at = cut
        sink.write(block[at:])

    def write_many(self, records: Iterable[bytes | _Message]) -> int:
        """Append many records.

        Args:
            records: Payload bytes or protobuf messages.

        Returns:
            How many records were written.

        Raises:
            OfindexError: The writer is closed.
            TypeError: A record is neither bytes nor a protobuf message.
        """
        n = 0
        for r in records:
            self.write(r)
            n += 1
        return n

    def close(self) -> None:
        """Finish the data file and its sidecar; a local file and its sidecar are written
        under temporary names, then renamed into place.

        Raises:
            OfindexError: The file on storage is not what was written (another process wrote
                to it); no sidecar is written then.
            StorageError: The disk is full (``errno`` ``ENOSPC``): nothing is kept.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self._finish()
        except OSError as exc:
            self._out_of_space(exc)
            raise

    def _finish(self) -> None:
        if self._sink is not None:
            self._sink.finish()
        self._file.close()
        if self._appending is not None:
            self._finish_append(self._appending)
            return
        if self._tmp is None:  # an object store: the upload is published by the close
            if self._index:
                self._index_storage.write_atomic(self._index_path, self._sidecar(self._path))
            return
        if not self._index:
            os.replace(self._tmp, self._path)
            self._placed = True
            return
        parts = self._sidecar(self._tmp)
        if isinstance(self._index_storage, LocalStorage):  # written whole before any rename
            self._staged = temporary_name(self._index_path)
            self._index_storage.write_atomic(self._staged, parts)
        self._index_storage.remove(self._index_path)  # never pair old index, new data
        os.replace(self._tmp, self._path)
        self._placed = True
        if self._staged is not None:
            os.replace(self._staged, self._index_path)
            self._staged = None
        else:
            self._index_storage.write_atomic(self._index_path, parts)

    def _finish_append(self, appending: Appending) -> None:
        """Grow the sidecar of the file appended to by the records written."""
        try:
            if self._index:
                offsets = (np.frombuffer(self._offsets, dtype=np.uint64) if self._offsets
                           else np.empty(0, np.uint64))
                crcs = None if self._crcs is None else np.frombuffer(self._crcs,
                                                                    dtype=np.uint32)
                sink = self._sink
                appending.finish(offsets, crcs, self._pos,
                                 None if sink is None else sink.seek_table(),
                                 self._pos - appending.end if sink is None else sink.written)
        finally:
            appending.release()

    def flush(self) -> None:
        """Hand what was written to the file now (to the operating system; a compressed
        file's records up to here are then readable: its compressor is flushed too), for
        readers that follow it as it is written.

        Raises:
            OfindexError: The writer is closed.
        """
        if self._closed:
            raise OfindexError(f"{self._url}: flush() on a closed Writer")
        if self._sink is not None:
            self._sink.sync()
        self._file.flush()

    def _sidecar(self, path: str) -> list[bytes | memoryview]:
        """The sidecar of the finished file at ``path`` (its temporary name, locally).

        Raises:
            OfindexError: The file is not what was written (another process wrote to it).
        """
        stamp: FileStamp = with_content(self._storage, path)  # size, mtime, content
        written = self._pos if self._sink is None else self._sink.written
        if stamp.size != written:
            raise OfindexError(
                f"{self._url}: {written} bytes were written but the file has {stamp.size}; "
                "another process wrote to it — no index written, rebuild it with "
                "`ofindex build`"
            )
        offsets = (np.frombuffer(self._offsets, dtype=np.uint64) if self._offsets
                   else np.empty(0, np.uint64))
        sink = self._sink
        crcs = None if self._crcs is None else np.frombuffer(self._crcs, dtype=np.uint32)
        header, body = encode_sidecar(
            self.format, offsets, stamp, self._pos, compression=self.compression,
            seek_points=None if sink is None else sink.seek_table(),
            spacing=0 if sink is None else sink.spacing, uncompressed_size=self._pos,
            checksums=crcs,
        )
        return [header, body]

    def _out_of_space(self, exc: OSError) -> None:
        """When ``exc`` says the disk is full: drop what was written and raise the error
        that says so (else return, for the caller to re-raise ``exc``)."""
        if self._tmp is None and self._closed:  # the object store has published the data
            then = ("the data file is written, but not its index: free some space and run "
                    f"`ofindex build {self._url}`")
        else:
            then = ("the unfinished file is removed, and a previous file of that name and its "
                    "index are as they were: free some space (or write to another disk, "
                    f"{hint('index_dir=', '--index-dir')} for the index) and write it again")
        error = no_space(self._url, exc, then)
        if error is None:
            return
        self.abort()
        raise error from exc

    def abort(self) -> None:
        """Close the data file without writing a sidecar (a local temporary file is removed,
        also when an interrupted :meth:`close` did not rename it into place, and so is a
        sidecar written ahead; a local file appended to is cut back to the records it had)."""
        self._closed = True
        with contextlib.suppress(OSError):  # a full disk fails the last flush: dropped anyway
            self._file.close()
        if self._appending is not None:
            if self._storage.is_local:  # back to the records it had (under its lock)
                with contextlib.suppress(OSError):
                    os.truncate(self._path, self._appending.size)
            self._appending.release()
        if self._tmp is not None and not self._placed:
            self._storage.remove(self._tmp)
        if self._staged is not None:
            self._index_storage.remove(self._staged)
            self._staged = None

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is not None:
            self.abort()
            return
        try:
            self.close()
        except BaseException:  # an interrupted close leaves no temporary file behind
            self.abort()
            raise

