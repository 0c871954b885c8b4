"""Writers that frame records and emit the sidecar as they write (no scan needed later)."""

from __future__ import annotations

import array
import os
from collections.abc import Iterable
from types import TracebackType
from typing import Any, Protocol

from crc32c import crc32c as _crc32c

from ..errors import OfindexError
from ..formats.framing import RecordFormat, frame_parts
from ..formats.location import sidecar_location
from ..formats.sidecar import encode_sidecar
from ..storage import FileStamp, LocalStorage, storage_for


class _Message(Protocol):
    def SerializeToString(self) -> bytes: ...


class Writer:
    """Write a TFRecord or OFRecord file and its sidecar index.

    >>> with Writer("train-00000.tfrecord") as w:          # doctest: +SKIP
    ...     w.write(b"raw bytes")
    ...     w.write(example)                                # any protobuf message

    Local files are written under a temporary name (``<name>.<pid>.tmp``) and renamed into
    place by a clean :meth:`close`, then the sidecar is written (atomically): a writer that dies
    midway leaves any previous file and its sidecar untouched, and readers that have the old
    file open (or memory-mapped) keep reading it. On object stores the upload is published by
    :meth:`close` anyway; there an existing sidecar of the target is removed first, so a writer
    that dies midway leaves no sidecar claiming records the data file lacks. Offsets are kept
    in memory (8 bytes per record).

    ``checksums``: store the CRC32C of every payload in the sidecar, which reads with
    ``verify=True`` then check (:mod:`ofindex.read.checksums`). The default (``None``) is on
    for OFRecord, which has no CRC of its own — a payload changed in place would otherwise
    read back as data — and off for TFRecord, whose framing carries CRCs already. The cost is
    one hardware CRC32C per record while writing (the payload is in cache then) and 4 bytes per
    record in the sidecar.
    """

    def __init__(
        self,
        url: str | os.PathLike[str],
        format: str | RecordFormat = "tfrecord",
        *,
        index: bool = True,
        index_dir: str | None = None,
        storage_options: dict[str, Any] | None = None,
        checksums: bool | None = None,
    ) -> None:
        self.format = RecordFormat.parse(format)
        if checksums is None:
            checksums = self.format is RecordFormat.OFRECORD
        self._crcs = array.array("I") if checksums and index else None
        self._storage, self._path = storage_for(os.fspath(url), storage_options)
        self._index = index
        self._index_storage, self._index_path = sidecar_location(
            self._storage, self._path, index_dir, storage_options
        )
        self._tmp = (f"{self._path}.{os.getpid()}.tmp" if isinstance(self._storage, LocalStorage)
                     else None)
        if index and self._tmp is None:
            self._index_storage.remove(self._index_path)
        self._file = self._storage.open_write(self._tmp or self._path)
        self._offsets = array.array("Q")
        self._pos = 0
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (f"Writer({self._storage.url(self._path)!r}, {self.format.name.lower()}, "
                f"{len(self._offsets)} records, {state})")

    def __len__(self) -> int:
        return len(self._offsets)

    def write(self, record: bytes | bytearray | memoryview | _Message) -> int:
        """Append one record (bytes, or a protobuf message); returns its record number."""
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
        f = self._file
        f.write(head)
        f.write(data)
        if foot:
            f.write(foot)
        if self._crcs is not None:
            self._crcs.append(_crc32c(data))
        self._offsets.append(self._pos)
        self._pos += len(head) + len(data) + len(foot)
        return len(self._offsets) - 1

    def write_many(self, records: Iterable[bytes | _Message]) -> int:
        """Append many records; returns how many were written."""
        n = 0
        for r in records:
            self.write(r)
            n += 1
        return n

    def close(self) -> None:
        """Finish the data file, then write its sidecar."""
        if self._closed:
            return
        self._closed = True
        self._file.close()
        if self._tmp is not None:
            if self._index:
                self._index_storage.remove(self._index_path)  # never pair old index, new data
            os.replace(self._tmp, self._path)
        if not self._index:
            return
        stamp: FileStamp = self._storage.stamp(self._path)
        if stamp.size != self._pos:
            raise OfindexError(
                f"{self._storage.url(self._path)}: {self._pos} bytes were written but the file "
                f"has {stamp.size}; another process wrote to it — no index written, rebuild it "
                "with `ofindex build`"
            )
        import numpy as np

        offsets = (np.frombuffer(self._offsets, dtype=np.uint64) if self._offsets
                   else np.empty(0, np.uint64))
        crcs = None if self._crcs is None else np.frombuffer(self._crcs, dtype=np.uint32)
        header, body = encode_sidecar(self.format, offsets, stamp, self._pos, checksums=crcs)
        self._index_storage.write_atomic(self._index_path, [header, body])

    def abort(self) -> None:
        """Close the data file without writing a sidecar."""
        if not self._closed:
            self._closed = True
            self._file.close()
            if self._tmp is not None:
                self._storage.remove(self._tmp)

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

