"""Remote files read through the machine's data cache (``cache_dir=`` with
``data_cache_bytes=``, a dataset that fits it: :mod:`ofindex.cache.data`).

A batch is read one of two ways:

* every file the batch touches held whole on local disk and mapped in this process, every
  touched sidecar loaded, the compiled module (and the CRC instruction for CRCs): one
  compiled pass over the blocks' maps, as over local files (a later epoch then reads at
  about the speed of local files, where the block reads below took ~2.5x as long:
  :mod:`ofindex.read.resident_gather`); a record failing a check there is read again as
  below;
* otherwise records are copied from the blocks of the files kept on local disk, the blocks
  missing fetched in one round and kept (at +20 ms RTT a second globally shuffled epoch
  makes no data request: see ``docs/benchmarks.md``;
  :func:`~ofindex.read.shard_reads.cached_blocks`). The data files' stamps, which key the
  blocks, are asked for in the batch's index round.

One record is a batch of one; iteration streams each shard through the cache.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from typing import Any

import numpy as np

from ...cache.data import DataCache
from ...formats.sidecar import Sidecar
from ...storage.ranges import DEFAULT_MAX_BYTES
from .. import streaming
from ..batch_source import BatchSource
from ..record_checks import RecordChecks
from ..resident_gather import ResidentShards, resident_gather
from ..shard_reads import cached_blocks, read_grouped
from ..shards import Shard
from ..table import ShardTable
from .shard_access import ShardAccess


@dataclasses.dataclass(frozen=True)
class CachedAccess(ShardAccess):
    """Remote files read through blocks kept on local disk (see the module).

    Attributes:
        native: The compiled module (resident files, and copies out of blocks), or ``None``.
        data_cache: The machine's cache of data blocks.
    """

    data_cache: DataCache

    def read_record(self, table: ShardTable, checks: RecordChecks, shard_no: int, shard: Shard,
                    sidecar: Sidecar, local: int, *, fresh: bool) -> Any:
        """The record read as a batch of one, through the cache (see
        :meth:`ShardAccess.read_record`)."""
        index = np.array([table.first_list[shard_no] + local], dtype=np.int64)
        # (one record's span is read whole whatever the largest merged read)
        return self.read_batch(table, checks, index, max_gap=None,
                               max_read_bytes=DEFAULT_MAX_BYTES)[0]

    def read_batch(self, table: ShardTable, checks: RecordChecks, indices: np.ndarray, *,
                   max_gap: int | None, max_read_bytes: int) -> list[Any]:
        """One compiled pass over files held whole, else copies out of cached blocks (see
        the module and :meth:`ShardAccess.read_batch`)."""
        native, data_cache = self.native, self.data_cache
        if native is not None:
            resident = ResidentShards.of(table, indices, data_cache, checks, native)
            if resident is not None:
                payloads = resident_gather(table, checks, resident, data_cache, native)
                if payloads is not None:
                    return payloads  # (None: a check failed in cached bytes: read below)
        return read_grouped(table, checks, indices, functools.partial(  # blocks are keyed
            cached_blocks, data_cache=data_cache, max_read_bytes=max_read_bytes,  # by stamps
            native=native), stamps_first=True)

    def blocks(self, src: BatchSource, shard_no: int, lo: int, hi: int,
               block_bytes: int = 8 << 20) -> Iterator[list[bytes]]:
        """The shard's records streamed through the cache's blocks."""
        shard = src.table.shards[shard_no]
        yield from streaming.stream_blocks(shard.storage, shard.path, shard.sidecar, lo, hi,
                                           src.checks.verify, block_bytes, self.data_cache,
                                           native=self.native)
