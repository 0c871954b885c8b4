"""Remote files read with range requests.

A batch's records are grouped by shard; one index round fetches the sidecar pages (or whole
sidecars) and data stamps the batch lacks (:func:`~ofindex.read.shard_reads.batch_spans`);
then neighbours are merged into ranges and fetched at once (concurrently, as multi-range
requests over HTTP), the records cut out of one buffer and checked
(:func:`~ofindex.read.shard_reads.planned_ranges`): two rounds cold, one once the pages are
cached. One record of a shard whose sidecar is loaded is one range request; iteration
streams each shard with large requests, the next one in flight while this one is cut.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from ..record_checks import RecordChecks
from ..shard_reads import planned_ranges, read_grouped
from ..table import ShardTable
from .shard_access import ShardAccess


@dataclasses.dataclass(frozen=True)
class RangedAccess(ShardAccess):
    """Remote files read with planned range requests (see the module).

    Attributes:
        native: The compiled module that cuts and checks the records, or ``None``.
    """

    def read_batch(self, table: ShardTable, checks: RecordChecks, indices: np.ndarray, *,
                   max_gap: int | None, max_read_bytes: int) -> list[Any]:
        """One index round for what the batch lacks, then one round of range requests (see
        :meth:`ShardAccess.read_batch`)."""
        return read_grouped(table, checks, indices, functools.partial(
            planned_ranges, max_gap=max_gap, max_read_bytes=max_read_bytes, native=self.native))
