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
  ``__getitems__``: :func:`compiled_preads`). A batch it cannot
  serve whole is read again as below, which raises the precise error;
* without it, records of :data:`~ofindex.read.payloads.DIRECT_RECORD_BYTES` (64 KiB) or more
  on average: each payload read into its own ``bytes``, no staging copy
  (:func:`direct_reads`);
* smaller records: neighbours merged into ranges read into one buffer, the records cut out
  of it (:func:`~ofindex.read.access.ranged.planned_ranges`).
"""

from __future__ import annotations

import dataclasses
import functools
from types import ModuleType
from typing import Any

import numpy as np

from .. import mapped_gather
from ..payloads import DIRECT_RECORD_BYTES, RecordChecks, read_record_direct
from ..table import ShardGroups, ShardTable
from .ranged import GroupReader, planned_ranges, read_grouped
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


def direct_reads(table: ShardTable, checks: RecordChecks, grouped: ShardGroups,
                 starts: np.ndarray, ends: np.ndarray) -> list[Any]:
    """Each payload read into its own ``bytes`` (header, payload and footer as three reads),
    on the process's threads when the batch is big (the reads and CRCs release the GIL)."""
    shards = table.shards

    def direct(item: tuple[int, int, int, int]) -> bytes:
        shard_no, a, b, r = item
        shard = shards[shard_no]
        return read_record_direct(shard.storage, shard.path, a, b, checks.format,
                                  checks.verify, r)

    items = list(zip(grouped.shard_of.tolist(), starts.tolist(), ends.tolist(),
                     grouped.local.tolist(), strict=True))
    if int((ends - starts).sum()) >= mapped_gather.PARALLEL_BYTES:
        return mapped_gather.map_ordered(direct, items)
    return [direct(item) for item in items]


def compiled_preads(table: ShardTable, checks: RecordChecks, grouped: ShardGroups,
                    starts: np.ndarray, ends: np.ndarray, *, max_gap: int,
                    otherwise: GroupReader, native: ModuleType) -> list[Any]:
    """Each payload read straight into its own ``bytes`` by ``preadv`` calls of the compiled
    module ``native`` without the GIL, neighbours in a file (gaps up to ``max_gap``) in one
    call, on the process's threads when the batch is big; a batch in which a record fails (or
    a file is shorter than its index says) is read again by ``otherwise`` (the way it is read
    without the compiled module), which raises the precise error.

    Args:
        table: The shards (on local storage, read through descriptors).
        checks: What to check (TFRecord CRCs need the CPU's CRC32C instruction here).
        grouped: The records, grouped by shard.
        starts: Their spans' starts (grouped order).
        ends: Their spans' ends.
        max_gap: Largest gap between two records read through rather than split.
        otherwise: Reads a batch the compiled reads could not serve whole.
        native: The compiled module.
    """
    shards = table.shards
    handles = []  # held until the reads are done: their descriptors stay open
    for shard_no, lo, hi in grouped.groups:
        shard = shards[shard_no]
        handle = shard.storage.handle(shard.path)
        if handle is None or not handle.covers(int(ends[lo:hi].max())):  # shorter than
            return otherwise(table, checks, grouped, starts, ends)  # its index says
        handles.append(handle)
    fds = [handle.fd for handle in handles]
    which = np.repeat(np.arange(len(handles), dtype=np.int64),
                      [hi - lo for _, lo, hi in grouped.groups])
    outs: list[Any] = native.blank(ends - starts - checks.overhead)
    order = np.lexsort((starts, which))  # file order: neighbours read together
    header, footer, verify = checks.header, checks.footer, checks.tfrecord_crcs
    gap = min(max_gap, PREADS_MAX_GAP)

    def work(part: tuple[int, int]) -> int:
        return int(native.preads(fds, which, starts, outs, order, part[0], part[1], header,
                                 footer, verify, gap))

    nbytes = int((ends - starts).sum())
    pool = mapped_gather.executor() if nbytes >= mapped_gather.PARALLEL_BYTES else None
    sizes = (ends - starts)[order]
    parts = mapped_gather.shares(sizes, mapped_gather.pool_shares() if pool is not None else 1)
    if mapped_gather.first_failing(work, parts, pool, len(outs)) < len(outs):
        return otherwise(table, checks, grouped, starts, ends)
    return outs


#: Largest gap compiled_preads reads through (csrc/preads.c's scratch buffer).
PREADS_MAX_GAP = 1 << 16
