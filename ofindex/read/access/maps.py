"""Local files memory-mapped, every byte read by the compiled module (in guarded calls: a
file truncated or rewritten in place under its map raises
:class:`~ofindex.errors.StaleIndexError` naming it, never SIGBUS; Python cannot guard its
reads of a map, so there is no pure-Python mapped access).

One record is one compiled call (span, checks, copy); once a record of a shard was read, the
dataset's compiled reader serves the shard's records in one call from the record number
(:mod:`ofindex.read.record_reader`). A batch is read one of two ways:

* one compiled pass over the maps in the order asked for, no sorting (about 1.5x the
  random-access speed of ``pread``: :func:`~ofindex.read.mapped_gather.compiled_gather`);
* a batch expected to hold at least :data:`~ofindex.read.mapped_gather.PARALLEL_BYTES`
  (4 MiB), with a second core and, when TFRecord CRCs are checked, the CPU's CRC32C
  instruction: copies and CRCs on the pool's threads without the GIL (256 random records of
  ~100 KB: a serial copy-and-check pass is slower than a columnar gather that checks
  nothing; on threads 1.6x Hugging Face's Arrow gather:
  :func:`~ofindex.read.mapped_gather.threaded_copies`).

A shard whose file is shorter than its index says is not served from its map: such a batch
(or record, or run of an iteration) is read through descriptors, which report what is wrong.
Iteration cuts batches out of the maps (:mod:`ofindex.read.sequential.mapped_batches`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import crc32c as _crc32c
import numpy as np

from ...formats.crc import LENGTH_CRCS
from ...formats.sidecar import Sidecar
from .. import mapped_gather
from ..batch_source import BatchSource
from ..mapped_gather import MappedShards, MappedSpans
from ..payloads import RecordChecks
from ..sequential import mapped_batches
from ..shards import Shard
from ..table import ShardTable
from .descriptors import DescriptorAccess
from .shard_access import ShardAccess, Streamed, check_record_sum


@dataclasses.dataclass(frozen=True)
class MappedAccess(ShardAccess):
    """Local files read from their memory maps by the compiled module (see the module).

    Attributes:
        native: The compiled module.
        otherwise: What reads a batch or record the maps cannot serve (a file shorter than
            its index says).
    """

    native: ModuleType
    otherwise: DescriptorAccess

    @property
    def binds_reader(self) -> bool:
        """Whether the dataset's compiled reader serves this access's shards once bound."""
        return True

    def read_record(self, table: ShardTable, checks: RecordChecks, shard_no: int, shard: Shard,
                    sidecar: Sidecar, local: int, *, fresh: bool) -> Any:
        """The record's span, checks and copy in one compiled call on the shard's map (see
        :meth:`ShardAccess.read_record`)."""
        native = self.native
        mapped = shard.storage.mapped(shard.path, sidecar.indexed_end)
        if mapped is None:  # shorter than its index says: read and reported otherwise
            return self.otherwise.read_record(table, checks, shard_no, shard, sidecar, local,
                                              fresh=fresh)
        if fresh:  # a first read in this process (or since a fork): the handler that guards
            native.guard_sigbus()  # the maps may have been replaced (a DataLoader worker's)
        got = native.record(mapped, sidecar.offsets, sidecar.indexed_end, local, checks.header,
                            checks.footer, checks.tfrecord_crcs, _crc32c.crc32c, LENGTH_CRCS)
        if not isinstance(got, bytes):
            maps = MappedShards([shard_no], np.zeros(1, np.int64), np.array([local]),
                                [mapped], [sidecar.offsets], [sidecar.indexed_end])
            mapped_gather.raise_mapped_problem(table, checks, maps, 0, got, native)
        check_record_sum(checks, shard, sidecar, local, got)
        return got

    def read_batch(self, table: ShardTable, checks: RecordChecks, indices: np.ndarray, *,
                   max_gap: int | None, max_read_bytes: int) -> list[Any]:
        """One compiled pass over the maps, or copies on threads for a big batch (see the
        module and :meth:`ShardAccess.read_batch`)."""
        maps = MappedShards.of(table, indices)
        if maps is None:  # a file shorter than its index says: read and reported otherwise
            return self.otherwise.read_batch(table, checks, indices, max_gap=max_gap,
                                             max_read_bytes=max_read_bytes)
        native = self.native
        big = len(indices) * table.mean_record_bytes >= mapped_gather.PARALLEL_BYTES
        if big and len(indices) > 1 and (not checks.tfrecord_crcs or native.hw_crc()):
            return mapped_gather.threaded_copies(table, checks, maps, native)
        return mapped_gather.compiled_gather(table, checks, maps, native)

    def iter_batches(self, src: BatchSource, batch_size: int, start: int, stop: int,
                     as_buffer: bool, streamed: Streamed) -> Iterator[Any] | None:
        """Each batch one compiled call per shard it touches (:mod:`ofindex.read.
        mapped_batches`); a run a map cannot serve is ``streamed``."""
        mapped = dataclasses.replace(src, native=self.native)
        return mapped_batches.mapped(mapped, batch_size, start, stop, as_buffer, streamed)

    def mapped_spans(self, table: ShardTable, checks: RecordChecks,
                     indices: np.ndarray, defer_crcs: bool = False) -> MappedSpans | None:
        """The batch checked in place in the maps, or ``None`` (see
        :meth:`ofindex.read.dataset.Dataset.mapped_spans`)."""
        maps = MappedShards.of(table, indices)
        return None if maps is None else mapped_gather.checked_spans(
            table, checks, maps, self.native, defer_crcs)

    def check_deferred(self, table: ShardTable, checks: RecordChecks, spans: MappedSpans,
                       crcs: np.ndarray) -> None:
        """Check the payloads' CRC-32Cs the caller computed (see
        :meth:`ofindex.read.dataset.Dataset.check_deferred`)."""
        mapped_gather.check_deferred(table, checks, spans, crcs, self.native)
