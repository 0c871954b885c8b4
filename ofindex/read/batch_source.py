"""What a dataset's batches are made from: its shard table, the checks of its reads and the
``decode`` applied to each record, in one typed object the batch and iteration modules take
(instead of the dataset itself, which imports them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from .payloads import RecordChecks
from .sequential.record_batch import RecordBatch
from .table import ShardTable

#: A callable applied to each record's bytes (``ofindex.open(..., decode=...)``).
Decode = Callable[[Any], Any]


@dataclasses.dataclass(frozen=True)
class BatchSource:
    """One dataset's records, as the batch and iteration modules read them.

    Attributes:
        table: The shards and the mapping of record numbers.
        checks: What each read checks.
        decode: Applied to each record of a list, or ``None``.
        native: The compiled module the access making the batches reads with, or ``None``
            (the pure-Python loops).
    """

    table: ShardTable
    checks: RecordChecks
    decode: Decode | None = None
    native: ModuleType | None = None

    def finish(self, payloads: list[Any], first: int, as_buffer: bool) -> Any:
        """A batch of payloads as the caller asked for it.

        Args:
            payloads: The batch's payloads, in order.
            first: The global number of its first record.
            as_buffer: Make a :class:`~ofindex.read.sequential.record_batch.RecordBatch` (raw
                payloads) instead of a list (decoded with a ``decode``).

        Returns:
            A list of payloads, or a ``RecordBatch``.
        """
        if as_buffer:
            offsets = np.zeros(len(payloads) + 1, dtype=np.int64)
            np.cumsum([len(p) for p in payloads], out=offsets[1:])
            return RecordBatch(np.frombuffer(b"".join(payloads), dtype=np.uint8).copy(),
                               offsets, first)
        return payloads if self.decode is None else [self.decode(p) for p in payloads]
