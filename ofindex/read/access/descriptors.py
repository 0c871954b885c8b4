"""Local files read through descriptors (``pread``): ``mmap=False`` (files that may be
truncated in place), or a storage that maps files when the compiled module is not built
(Python cannot guard its reads of a map).

One record is one checked ``pread`` of its span; with the compiled module the dataset's
compiled reader then serves the shard's records with one ``preadv`` each
(:mod:`ofindex.read.record_reader`). A batch is read one of three ways:

* with the compiled module's ``preadv`` (and the CPU's CRC32C instruction when TFRecord CRCs
  are checked): each payload read into its own ``bytes`` with the GIL released, neighbours in
  one call, big batches on threads (256 x 100 KB: 25 k records per CPU second, 10-11 k
  through Python-level ``pread`` calls, three per record; 1.6x ArrayRecord's
  ``__getitems__``: :func:`~ofindex.read.shard_reads.compiled_preads`). A batch it cannot
  serve whole is read again as below, which raises the precise error;
* without it, records of :data:`~ofindex.read.payloads.DIRECT_RECORD_BYTES` (64 KiB) or more
  on average: each payload read into its own ``bytes``, no staging copy
  (:func:`~ofindex.read.shard_reads.direct_reads`);
* smaller records: neighbours merged into ranges read into one buffer, the records cut out
  of it (:func:`~ofindex.read.shard_reads.planned_ranges`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from ..payloads import DIRECT_RECORD_BYTES
from ..record_checks import RecordChecks
from ..shard_reads import GroupReader, compiled_preads, direct_reads, planned_ranges, read_grouped
from ..table import ShardTable
from .shard_access import ShardAccess


@dataclasses.dataclass(frozen=True)
class DescriptorAccess(ShardAccess):
    """Local files read with ``pread`` (see the module).

    Attributes:
        native: The compiled module (its ``preadv`` batches and compiled reader), or
            ``None`` (Python-level ``pread`` calls).
    """

    @property
    def binds_reader(self) -> bool:
        """Whether the dataset's compiled reader serves this access's shards once bound."""
        return self.native is not None

    def read_batch(self, table: ShardTable, checks: RecordChecks, indices: np.ndarray, *,
                   max_gap: int | None, max_read_bytes: int) -> list[Any]:
        """Compiled ``preadv`` calls, or Python-level reads (see the module and
        :meth:`ShardAccess.read_batch`)."""
        uncompiled: GroupReader = (
            direct_reads if table.mean_record_bytes >= DIRECT_RECORD_BYTES else
            functools.partial(planned_ranges, max_gap=max_gap, max_read_bytes=max_read_bytes,
                              native=self.native))
        native = self.native
        if (native is None or not native.reads_files
                or (checks.tfrecord_crcs and not native.hw_crc())):
            return read_grouped(table, checks, indices, uncompiled)
        shard = table.shards[table.locate(int(indices[0]))[0]]
        gap = shard.storage.preferred_gap(shard.path) if max_gap is None else max_gap
        return read_grouped(table, checks, indices, functools.partial(
            compiled_preads, max_gap=gap, otherwise=uncompiled, native=native))
