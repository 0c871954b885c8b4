"""Appending records to an existing data file (``Writer(path, append=True)``).

The file is indexed first when its sidecar is missing or not fresh (a grown file only from
where its index ends: :mod:`ofindex.index.growth`), then written in place: locally opened for
appending (readers that follow it see the records as they are flushed,
:meth:`ofindex.Dataset.follow`), on an object store (which cannot append) uploaded again whole,
its old bytes first. A compressed file gains a new gzip member (zlib stream), whose seek points
the writer places as it writes. When the writer closes, the sidecar grows by one segment
holding the records written (:mod:`ofindex.formats.sidecar_growth`): nothing that readers hold
is rewritten.

While a local file is appended to, ofindex's other appenders are kept out by an exclusive
``flock`` of the file (advisory: another program that writes it is not stopped, and is
refused at :meth:`Appending.finish` when the file is not what was written).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
from typing import IO

import numpy as np

from ..errors import CorruptRecordError, OfindexError, TruncatedRecordError, hint
from ..formats.framing import RecordFormat
from ..formats.seekpoints import empty_table
from ..formats.sidecar import Sidecar, load_sidecar
from ..formats.sidecar_growth import Growth
from ..formats.sidecar_header import Compression
from ..index.growth import write_growth
from ..index.job import FileJob
from ..storage import Storage
from ..storage.identity import with_content

try:  # POSIX: one appender at a time
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - Windows: appends are not locked
    _fcntl = None  # type: ignore[assignment]

#: Bytes copied at a time when an object is uploaded again with its old bytes first.
_COPY_BYTES = 8 << 20


@dataclasses.dataclass
class Appending:
    """A data file opened for appending: its index then, and where the new records start.

    Attributes:
        storage: Storage of the data file.
        path: The data file.
        index_storage: Storage of its sidecar.
        index_path: The sidecar.
        sidecar: Its index when it was opened for appending.
        lock: The descriptor holding the file's lock (local files), or ``None``.
    """

    storage: Storage
    path: str
    index_storage: Storage
    index_path: str
    sidecar: Sidecar
    lock: int | None = None

    @property
    def size(self) -> int:
        """The file's size when it was opened (bytes on storage)."""
        return self.sidecar.header.stamp.size

    @property
    def end(self) -> int:
        """Where the first new record starts (in the uncompressed stream)."""
        return self.sidecar.header.indexed_end

    @property
    def compression(self) -> Compression:
        """The file's compression (kept by what is appended)."""
        return self.sidecar.header.compression

    @property
    def checksums(self) -> bool:
        """Whether its sidecar keeps payload checksums (so must what is appended)."""
        return self.sidecar.checksums is not None

    def open(self) -> IO[bytes]:
        """The file to write the new records to: the data file opened for appending, or (an
        object store) a new upload of it holding its old bytes (copied aside first: opening
        an object for writing may empty it at once)."""
        storage, path = self.storage, self.path
        if storage.is_local:
            return open(path, "ab")
        with tempfile.SpooledTemporaryFile(_COPY_BYTES) as old:
            for at in range(0, self.size, _COPY_BYTES):
                old.write(storage.read(path, at, min(self.size, at + _COPY_BYTES)))
            old.seek(0)
            out = storage.open_write(path)
            try:
                shutil.copyfileobj(old, out, _COPY_BYTES)
            except BaseException:
                with contextlib.suppress(Exception):
                    out.close()
                raise
        return out

    def finish(self, offsets: np.ndarray, checksums: np.ndarray | None, end: int,
               seek_points: np.ndarray | None, stored: int) -> None:
        """Grow the sidecar by the records written, once the file is closed.

        Args:
            offsets: Where each new record starts (uncompressed stream).
            checksums: Their payload CRC32Cs (when the sidecar keeps them), or ``None``.
            end: Where the last one ends.
            seek_points: The seek points of the member appended (compressed files).
            stored: The bytes written to the file (compressed, for a compressed file).

        Raises:
            OfindexError: The file is not what was written (another process wrote to it):
                its sidecar is left as it was.
        """
        h = self.sidecar.header
        stamp = with_content(self.storage, self.path)
        if stamp.size != self.size + stored:
            raise OfindexError(
                f"{self.storage.url(self.path)}: {stored} bytes were appended to "
                f"{self.size} but the file has {stamp.size}; another process wrote to it — "
                f"its index was not grown: run `ofindex build {self.storage.url(self.path)}`")
        points = empty_table() if seek_points is None else seek_points
        header = dataclasses.replace(
            h, count=h.count + len(offsets), stamp=stamp, indexed_end=end,
            uncompressed_size=end, seek_points=h.seek_points + len(points), open_tail=False)
        write_growth(self.index_storage, self.index_path, self.sidecar,
                     Growth(header, offsets, checksums, points, b""))

    def release(self) -> None:
        """Let other appenders in (the lock of a local file)."""
        lock, self.lock = self.lock, None
        if lock is not None:
            os.close(lock)  # (closing the descriptor releases its flock)


def open_for_append(storage: Storage, path: str, index_storage: Storage, index_path: str,
                    fmt: RecordFormat, compression: Compression | None,
                    checksums: bool | None) -> Appending:
    """Index ``path`` where its sidecar is missing or stale, lock it and return what
    appending to it needs.

    Args:
        storage: Storage of the data file (it exists).
        path: The data file.
        index_storage: Storage of its sidecar.
        index_path: Its sidecar.
        fmt: The framing the records are written in (the file's must be it).
        compression: The compression asked for (``None``: the file's).
        checksums: Payload checksums asked for (``True``: a sidecar without them is
            rebuilt with them).

    Raises:
        OfindexError: Another writer appends to it, it is of another framing or compression,
            or it ends inside a record (a writer that died while writing one).
        CorruptRecordError: It is damaged.
    """
    url = storage.url(path)
    lock = _lock(storage, path)
    try:
        job = FileJob(storage, path, fmt, index_storage, index_path, compression=compression,
                      checksums=checksums)
        try:
            job.run(True)
        except TruncatedRecordError as exc:
            raise OfindexError(
                f"{url}: cannot append: the file ends inside a record (a writer that died "
                f"while writing it?): {exc}; copy its whole records to a new file, e.g. "
                "`ofindex build --allow-partial` and a copy of what it indexes") from None
        sidecar = load_sidecar(index_storage, index_path)
        h = sidecar.header
        if h.format is not fmt:
            raise OfindexError(f"{url} is {h.format.name.lower()}: append to it with "
                               + hint(f"format={h.format.name.lower()!r}",
                                      f"--format {h.format.name.lower()}"))
        if h.stamp.size != storage.stamp(path).size or h.partial or h.open_tail:
            raise CorruptRecordError(f"{url}: cannot append: its index does not cover it "
                                     "(written to meanwhile, or damaged)", path=url)
    except BaseException:
        if lock is not None:
            os.close(lock)
        raise
    return Appending(storage, path, index_storage, index_path, sidecar, lock)


def _lock(storage: Storage, path: str) -> int | None:
    """Take the exclusive lock of a local file, or refuse: another appender holds it."""
    if not storage.is_local or _fcntl is None:
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        _fcntl.flock(fd, _fcntl.LOCK_EX | _fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise OfindexError(f"{path}: another writer is appending to it; append once it is "
                           "closed") from None
    return fd
