"""The compiled fast path of ``ds[i]`` on local files: one call from the record number to its
checked payload.

``ds[i]`` through Python costs about 1.5 µs (locating the shard, checking the sidecar is held
in this process, finding the map, calling the compiled cut) where a bare slice of a memory
map costs about 0.4 µs. A :class:`ofindex._native.Reader` does the whole read in one call:
it holds, for each shard bound to it, the data file's memory map (or, with ``mmap=False``, its
open descriptor, read with one ``preadv`` into the payload's own ``bytes``), the sidecar's
offsets and indexed end and, for OFRecord sidecars that have them, the payload checksums;
``get(i)`` locates the record through the cumulative counts, checks its span, its stored
length against that span, its TFRecord CRCs or its sidecar checksum, and returns the
payload.

It serves only what it can serve whole: anything else (an index of another type or out of
range, a shard not bound yet, a record that fails a check, a short read) gives ``None``, and
the dataset reads the record the ordinary way, which raises the precise error; so the fast
path returns exactly what the ordinary path returns, or defers to it. A shard is bound once
a record of it has been read the ordinary way (its sidecar loaded and its offsets checked,
its data file opened and checked to be the file its index describes). The reader lets go of
its maps and descriptors when the dataset's storage is closed, after ``fork`` (a child opens
and checks its own files), and when it would hold more files than the storage keeps open
(:meth:`~ofindex.storage.Storage.open_limit`: a file the storage closed is checked again
when it is reopened). Each bound shard counts among the process's open files
(:mod:`ofindex.storage.openfiles`), which let go of the oldest ones beyond its bound.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

import crc32c as _crc32c

from ..formats.crc import LENGTH_CRCS
from ..formats.sidecar import Sidecar
from ..storage.openfiles import OPEN_FILES
from .payloads import RecordChecks
from .table import ShardTable

if TYPE_CHECKING:
    from .._accel import Reader


def new_reader(table: ShardTable, checks: RecordChecks, native: ModuleType) -> Reader | None:
    """A reader of ``table``'s records with ``checks`` (no shard bound yet), made by the
    compiled module ``native``; each shard's storage closes it (:func:`bind`). ``None`` for a
    table without shards.

    Args:
        table: The dataset's shards.
        checks: What each read checks.
        native: The compiled module.
    """
    if not table.shards:
        return None
    reader: Reader = native.Reader(table.cumulative, checks.header, checks.footer,
                                   checks.tfrecord_crcs, checks.payload_sums,
                                   _crc32c.crc32c, LENGTH_CRCS, table.storage.open_limit())
    table.storage.close_together(reader)
    return reader


def bind(reader: Reader, table: ShardTable, checks: RecordChecks, shard_no: int,
         sidecar: Sidecar, native: ModuleType) -> None:
    """Let ``reader`` serve shard ``shard_no`` (on local storage), a record of which was just
    read the ordinary way with its sidecar ``sidecar`` (a compressed shard is not served: its
    records are inflated from seek points).

    Args:
        reader: The dataset's reader (:func:`new_reader`).
        table: The dataset's shards.
        checks: What each read checks.
        shard_no: The shard.
        sidecar: Its sidecar, loaded and checked in this process.
        native: The compiled module (that made the reader).
    """
    if sidecar.compressed:
        return
    shard = table.shards[shard_no]
    storage, path = shard.storage, shard.path
    sums = sidecar.checksums if checks.payload_sums else None
    bound = False
    if storage.can_mmap:
        mapped = storage.mapped(path, sidecar.indexed_end)
        if mapped is not None:  # (else a file that grew past its map: read the ordinary way)
            bound = reader.bind_map(shard_no, mapped, sidecar.offsets, sidecar.indexed_end,
                                    sums)
    else:
        handle = storage.handle(path) if native.reads_files else None
        if handle is not None and handle.covers(sidecar.indexed_end):  # (else: truncated)
            bound = reader.bind_file(shard_no, handle, handle.fd, sidecar.indexed_end,
                                     sidecar.offsets, sidecar.indexed_end, sums)
    if bound:  # its data file and its sidecar's map (may let go of the oldest files)
        if storage is not table.storage:  # a joined dataset's shard: closed with its own
            storage.close_together(reader)  # storage too
        OPEN_FILES.hold(reader, shard_no, 2)
