"""Gzip/zlib compressed files, local or remote: records inflated from the seek point before
them (:mod:`ofindex.read.compressed`; zlib's inflate cannot be guarded against a map whose
file shrank, so compressed bytes are read with ``pread`` or range requests, never mapped).

One record is one read of the compressed bytes from its seek point, inflated up to its end.
A batch is grouped by shard and cut into pieces that one inflate pass serves, each piece's
compressed span read once (remote pieces all at once) and inflated once (big batches on a
few threads). Iteration inflates each shard once from its start
(:mod:`ofindex.read.sequential.compressed_stream`), checking the gzip CRC32 / zlib Adler-32
at the end of a whole pass.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np

from ...formats.sidecar import Sidecar
from .. import compressed
from ..batch_source import BatchSource
from ..payloads import RecordChecks
from ..sequential import compressed_stream
from ..shards import Shard
from ..table import ShardTable
from .shard_access import ShardAccess

#: Records per list when a compressed shard is streamed.
INFLATED_BLOCK = 4096


@dataclasses.dataclass(frozen=True)
class InflatingAccess(ShardAccess):
    """Compressed files, their records inflated from seek points (see the module).

    Attributes:
        native: The compiled module that cuts the inflated records out, or ``None`` (the
            inflater itself is :mod:`ofindex.deflate`'s choice).
    """

    def read_record(self, table: ShardTable, checks: RecordChecks, shard_no: int, shard: Shard,
                    sidecar: Sidecar, local: int, *, fresh: bool) -> Any:
        """The record inflated from the seek point before it (see
        :meth:`ShardAccess.read_record`)."""
        return compressed.read_record(shard.storage, shard.path, sidecar, local, checks.format,
                                      checks.verify, self.native)

    def read_batch(self, table: ShardTable, checks: RecordChecks, indices: np.ndarray, *,
                   max_gap: int | None, max_read_bytes: int) -> list[Any]:
        """Each touched shard's records inflated piece by piece (see
        :meth:`ShardAccess.read_batch`; the sidecars are loaded by the caller)."""
        groups = table.group(indices)
        out: list[Any] = []
        for shard_no, lo, hi in groups.groups:
            shard = table.shards[shard_no]
            out += compressed.read_records(shard.storage, shard.path, shard.sidecar,
                                           groups.local[lo:hi], checks.format, checks.verify,
                                           self.native)
        return groups.restore(out)

    def blocks(self, src: BatchSource, shard_no: int, lo: int, hi: int,
               block_bytes: int = 8 << 20) -> Iterator[list[bytes]]:
        """The shard inflated once from the seek point before record ``lo``, a list of
        records at a time."""
        shard = src.table.shards[shard_no]
        records = compressed_stream.stream_compressed(
            shard.storage, shard.path, shard.sidecar, lo, hi, src.checks.verify, block_bytes,
            native=self.native)
        while block := list(itertools.islice(records, INFLATED_BLOCK)):
            yield block
