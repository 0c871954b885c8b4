"""How a batch of records is read: the one place that chooses, and why.

:func:`choose` looks at the batch and the dataset's storage and returns one
:class:`BatchStrategy`; :func:`read_batch` runs it. The strategies, in the order they are
considered (the first whose condition holds is taken):

========================  ===============================================================
strategy                  condition, and the measurement behind it
========================  ===============================================================
``COMPRESSED``            a shard of the dataset is gzip/zlib compressed: records are
                          inflated from their seek points, piece by piece
                          (:mod:`ofindex.read.compressed`); its uncompressed shards are
                          read by the strategies below.
``THREADED_COPIES``       compiled module, every shard of the batch memory-mapped, the batch
                          expected to hold >= 4 MiB, a second core, and the CPU's CRC32C
                          instruction when TFRecord CRCs are checked: copies and CRCs on
                          threads without the GIL (256 random records of ~100 KB: a serial
                          copy-and-check pass is slower than a columnar gather that checks
                          nothing; on threads 1.6x Hugging Face's Arrow gather).
``COMPILED_GATHER``       compiled module, every shard of the batch memory-mapped: one
                          compiled pass in the order asked for, no sorting (about 1.5x the
                          random-access speed of ``pread``).
``COMPILED_PREADS``       local files read through descriptors (``mmap=False``), compiled
                          module with ``preadv`` (and the CRC32C instruction when TFRecord
                          CRCs are checked): each payload read into its own ``bytes`` with
                          the GIL released, neighbours in one call, big batches on threads
                          (256 x 100 KB: 25 k records per CPU second, 10-11 k through
                          Python-level ``pread`` calls, three per record; 1.6x
                          ArrayRecord's ``__getitems__``). A batch it cannot serve whole is
                          read again as below, which raises the precise error.
``DIRECT_READS``          local files read with ``pread`` (``mmap=False``), records of
                          64 KiB or more on average: each payload read into its own
                          ``bytes``, no staging copy.
``RESIDENT_BLOCKS``       remote data files and a data cache, every file the batch touches
                          held whole on local disk and mapped in this process, every
                          touched sidecar loaded, the compiled module (and the CRC
                          instruction for CRCs): one compiled pass over the blocks' maps,
                          as ``COMPILED_GATHER`` over local files
                          (:mod:`ofindex.read.resident_gather`; a later epoch then reads
                          at about the speed of local files, where the planned reads below
                          took ~2.5x as long); a record failing a check there is read
                          again by ``CACHED_BLOCKS``.
``CACHED_BLOCKS``         remote data files and a data cache (``cache_dir=`` with
                          ``data_cache_bytes=``, a dataset that fits it): records copied
                          from blocks of the files kept on local disk, the blocks missing
                          fetched in one round and kept (:mod:`ofindex.cache.data`;
                          at +20 ms RTT a second globally shuffled epoch makes no data
                          request: see ``docs/benchmarks.md``).
``PLANNED_RANGES``        everything else (remote storage; small records with ``pread``):
                          neighbours merged into ranges, fetched at once (concurrently, as
                          multi-range requests over HTTP), records cut out of one buffer.
========================  ===============================================================

"Memory-mapped" means the storage can map files (:attr:`Storage.can_mmap`), the compiled
module reads the maps (in guarded calls: a file truncated or rewritten in place under its map
raises :class:`~ofindex.errors.StaleIndexError` naming it; Python cannot guard its reads of a
map, so without the compiled module files are read with ``pread``), and each shard's file
still covers its index (a file shorter than its index is read by the planned reads, which
report what is wrong). Every strategy checks every record the same way (stored length
against the index; TFRecord CRCs and OFRecord sidecar checksums with ``verify``) and reports
the first bad record of the batch in the order asked for; the tests hold each strategy to
the others' results.
"""

from __future__ import annotations

import enum
import functools
from typing import Any

import numpy as np

from .. import _accel
from ..cache.data import DataCache
from ..storage import openfiles
from . import compressed, mapped_gather
from .mapped_gather import MappedShards, compiled_gather, executor, threaded_copies
from .payloads import DIRECT_RECORD_BYTES
from .record_checks import RecordChecks
from .resident_gather import ResidentShards, resident_gather
from .shard_reads import (
    cached_blocks,
    compiled_preads,
    direct_reads,
    planned_ranges,
    read_grouped,
)
from .table import ShardTable


class BatchStrategy(enum.Enum):
    """The ways to read a batch (see the module's table)."""

    COMPRESSED = "compressed"
    THREADED_COPIES = "threaded-copies"
    COMPILED_GATHER = "compiled-gather"
    COMPILED_PREADS = "compiled-preads"
    DIRECT_READS = "direct-reads"
    RESIDENT_BLOCKS = "resident-blocks"
    CACHED_BLOCKS = "cached-blocks"
    PLANNED_RANGES = "planned-ranges"


def choose(table: ShardTable, checks: RecordChecks, indices: np.ndarray, *,
           compressed_shards: bool, data_cache: DataCache | None = None,
           ) -> tuple[BatchStrategy, MappedShards | ResidentShards | None]:
    """The strategy for records ``indices`` (valid, non-negative) of ``table``.

    Args:
        table: The dataset's shards.
        checks: What each read checks.
        indices: The batch's records.
        compressed_shards: Whether any shard of the dataset is compressed.
        data_cache: The machine's cache of remote data blocks, when the dataset uses one.

    Returns:
        The strategy, and for the mapped ones the maps of the shards the batch touches
        (for ``RESIDENT_BLOCKS``, their files' blocks).

    Raises:
        IndexNotFoundError, StaleIndexError, SidecarError: Loading a touched sidecar failed.
    """
    if compressed_shards:
        return BatchStrategy.COMPRESSED, None
    storage, native = table.storage, _accel.native
    if storage.can_mmap and native is not None:
        maps = MappedShards.of(table, indices)
        if maps is not None:
            big = len(indices) * table.mean_record_bytes >= mapped_gather.PARALLEL_BYTES
            if (big and len(indices) > 1 and executor() is not None
                    and (not checks.tfrecord_crcs or native.hw_crc())):
                return BatchStrategy.THREADED_COPIES, maps
            return BatchStrategy.COMPILED_GATHER, maps
    if (storage.is_local and native is not None and native.reads_files
            and (not checks.tfrecord_crcs or native.hw_crc())):
        return BatchStrategy.COMPILED_PREADS, None
    if data_cache is not None and not storage.is_local:
        resident = ResidentShards.of(table, indices, data_cache, checks)
        if resident is not None:
            return BatchStrategy.RESIDENT_BLOCKS, resident
        return BatchStrategy.CACHED_BLOCKS, None
    return _uncompiled(table), None


def _uncompiled(table: ShardTable) -> BatchStrategy:
    """How a batch that is neither memory-mapped nor cached is read without compiled reads."""
    if table.storage.is_local and table.mean_record_bytes >= DIRECT_RECORD_BYTES:
        return BatchStrategy.DIRECT_READS
    return BatchStrategy.PLANNED_RANGES


def read_batch(table: ShardTable, checks: RecordChecks, indices: np.ndarray, *,
               compressed_shards: bool, max_gap: int | None, max_read_bytes: int,
               data_cache: DataCache | None = None) -> list[Any]:
    """The payloads of records ``indices`` (valid, non-negative), in that order.

    A batch over more shards than a read may hold at once (:func:`ofindex.storage.openfiles.
    limits`) is read in consecutive parts, each by the strategy it calls for: the first bad
    record in the order asked for is still the one reported.

    Args:
        table: The dataset's shards.
        checks: What to check in each record.
        indices: The records.
        compressed_shards: Whether any shard of the dataset is compressed.
        max_gap: Planned reads: largest gap read through rather than split (``None``: the
            storage's preferred gap when the ranges are planned).
        max_read_bytes: Planned reads: largest merged read.
        data_cache: The machine's cache of remote data blocks, when the dataset uses one.

    Raises:
        CorruptRecordError, SidecarError, StaleIndexError, RangeReadError: As every read.
    """
    read = functools.partial(_read_batch, table, checks, compressed_shards=compressed_shards,
                             max_gap=max_gap, max_read_bytes=max_read_bytes,
                             data_cache=data_cache)
    pieces = table.pieces(indices, openfiles.limits().per_read) if len(indices) > 2 else None
    if pieces is None:
        return read(indices)
    return [payload for lo, hi in pieces for payload in read(indices[lo:hi])]


def _read_batch(table: ShardTable, checks: RecordChecks, indices: np.ndarray, *,
                compressed_shards: bool, max_gap: int | None, max_read_bytes: int,
                data_cache: DataCache | None = None) -> list[Any]:
    """:func:`read_batch` of a batch over at most the shards a read may hold at once."""
    strategy, maps = choose(table, checks, indices, compressed_shards=compressed_shards,
                            data_cache=data_cache)
    if strategy is BatchStrategy.COMPRESSED:
        return compressed.read_batch(table, checks, indices, functools.partial(
            read_batch, table, checks, compressed_shards=False, max_gap=max_gap,
            max_read_bytes=max_read_bytes, data_cache=data_cache))
    if strategy is BatchStrategy.RESIDENT_BLOCKS:
        assert isinstance(maps, ResidentShards) and data_cache is not None
        payloads = resident_gather(table, checks, maps, data_cache)
        if payloads is not None:
            return payloads
        strategy = BatchStrategy.CACHED_BLOCKS  # a check failed in cached bytes: see there
    if strategy is BatchStrategy.THREADED_COPIES:
        assert isinstance(maps, MappedShards)
        return threaded_copies(table, checks, maps)
    if strategy is BatchStrategy.COMPILED_GATHER:
        assert isinstance(maps, MappedShards)
        return compiled_gather(table, checks, maps)
    if strategy is BatchStrategy.CACHED_BLOCKS:
        assert data_cache is not None
        return read_grouped(table, checks, indices, functools.partial(  # blocks are keyed by
            cached_blocks, data_cache=data_cache, max_read_bytes=max_read_bytes),  # stamps
            stamps_first=True)
    uncompiled = (direct_reads if _uncompiled(table) is BatchStrategy.DIRECT_READS else
                  functools.partial(planned_ranges, max_gap=max_gap,
                                    max_read_bytes=max_read_bytes))
    if strategy is BatchStrategy.COMPILED_PREADS:  # (local: no data cache)
        gap = table.storage.preferred_gap(table.shards[0].path) if max_gap is None else max_gap
        return read_grouped(table, checks, indices, functools.partial(
            compiled_preads, max_gap=gap, otherwise=uncompiled))
    return read_grouped(table, checks, indices, uncompiled)
