"""What every access does alike: the interface the dataset reads a shard through, and the
plain checked read of one record that the descriptor and ranged accesses share.

An access reads the records of the shards bound to it (:mod:`ofindex.read.access` binds each
shard once): one record, a batch, the blocks of a run of one shard, and the batches of an
iteration. It holds the compiled module it reads with (``native``), or ``None``: then the
pure-Python loops run, the same checks in the same order (the test oracle of the compiled
loops, and the one fallback when the compiled module could not be built). Each shard
carries the storage of its data file; an access holds no storage, so that the shards of
datasets opened apart (a joined dataset's) are read by one access in one call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import crc32c as _crc32c
import numpy as np

from ...formats.sidecar import Sidecar
from ..batch_source import BatchSource
from ..mapped_gather import MappedSpans
from ..payloads import RecordChecks
from ..sequential import streaming
from ..shards import Shard
from ..sum_checks import check_one
from ..table import ShardTable

#: Reads records ``a..b-1`` of a dataset streamed by their shards' accesses.
Streamed = Callable[[BatchSource, int, int], list[bytes]]


@dataclasses.dataclass(frozen=True)
class ShardAccess:
    """One way of reading shards (a subclass per kind; equal accesses read alike, so that a
    batch over shards of several datasets bound to equal accesses is one read).

    Attributes:
        native: The compiled module the reads use, or ``None`` (the pure-Python loops).
    """

    native: ModuleType | None

    @property
    def binds_reader(self) -> bool:
        """Whether a record read here lets the dataset's compiled reader serve its shard next
        (:mod:`ofindex.read.record_reader`: local files with the compiled module)."""
        return False

    def read_record(self, table: ShardTable, checks: RecordChecks, shard_no: int, shard: Shard,
                    sidecar: Sidecar, local: int, *, fresh: bool) -> Any:
        """The payload of record ``local`` of a shard whose sidecar is loaded: its span read
        with one read of the shard's storage (``pread`` locally, a range request remotely),
        its framing and checks as every read checks them.

        Args:
            table: The dataset's shards.
            checks: What to check.
            shard_no: The shard's number.
            shard: The shard.
            sidecar: Its sidecar, loaded in this process.
            local: The record's number inside the shard.
            fresh: Whether this is the first read of the dataset in this process (or since
                a fork), before its compiled reader is bound.

        Raises:
            CorruptRecordError, SidecarError, RangeReadError: As every read.
        """
        storage = shard.storage
        start, end = sidecar.span(local)
        if end - start < checks.overhead or end > sidecar.indexed_end:  # corrupt offsets
            raise sidecar.bad_span(local, start, end)  # (checked by spans() in batches)
        payload = checks.unframe(storage.read(shard.path, start, end), checks.verify,
                                 storage.url(shard.path), start, local)
        check_record_sum(checks, shard, sidecar, local, payload)
        return payload

    def read_batch(self, table: ShardTable, checks: RecordChecks, indices: np.ndarray, *,
                   max_gap: int | None, max_read_bytes: int) -> list[Any]:
        """The payloads of records ``indices`` (valid, non-negative, in shards bound to this
        access, at most as many shards as a read may hold at once), in that order.

        Args:
            table: The dataset's shards.
            checks: What to check.
            indices: The records.
            max_gap: Largest gap read through rather than split (``None``: the storage's).
            max_read_bytes: Largest merged read.

        Raises:
            CorruptRecordError, SidecarError, StaleIndexError, RangeReadError: As every read
                (the first bad record in the order asked for).
        """
        raise NotImplementedError

    def blocks(self, src: BatchSource, shard_no: int, lo: int, hi: int,
               block_bytes: int = 8 << 20) -> Iterator[list[bytes]]:
        """Payloads of records ``lo..hi-1`` of one shard, in order, a list at a time, read
        with large sequential reads.

        Args:
            src: The dataset's records.
            shard_no: The shard.
            lo: Its first record.
            hi: One past its last.
            block_bytes: Size of each read.
        """
        shard = src.table.shards[shard_no]
        yield from streaming.stream_blocks(shard.storage, shard.path, shard.sidecar, lo, hi,
                                           src.checks.verify, block_bytes, native=self.native)

    def iter_batches(self, src: BatchSource, batch_size: int, start: int, stop: int,
                     as_buffer: bool, streamed: Streamed) -> Iterator[Any] | None:
        """The batches of records ``start..stop-1`` (valid) of shards all bound to this
        access, when it makes them its own way; ``None``: they are regrouped from the blocks
        each shard streams (:meth:`blocks`).

        Args:
            src: The dataset's records.
            batch_size: Records per batch.
            start: First record.
            stop: One past the last record.
            as_buffer: Make :class:`~ofindex.read.sequential.record_batch.RecordBatch` objects.
            streamed: Reads records ``a..b-1`` streamed by their shards' accesses.
        """
        return None

    def mapped_spans(self, table: ShardTable, checks: RecordChecks,
                     indices: np.ndarray, defer_crcs: bool = False) -> MappedSpans | None:
        """Where the payloads of a batch lie in the memory maps of their shards, checked in
        place, or ``None`` (only memory-mapped shards have maps; see
        :meth:`ofindex.read.dataset.Dataset.mapped_spans`)."""
        return None

    def check_deferred(self, table: ShardTable, checks: RecordChecks, spans: MappedSpans,
                       crcs: np.ndarray) -> None:
        """Check the payloads' CRC-32Cs the caller of ``mapped_spans(defer_crcs=True)``
        computed (only memory-mapped shards defer them)."""


def check_record_sum(checks: RecordChecks, shard: Shard, sidecar: Sidecar, local: int,
                     payload: Any) -> None:
    """Check an OFRecord payload against its sidecar checksum, when ``verify`` and the
    sidecar has them.

    Raises:
        CorruptRecordError: It differs.
    """
    if not checks.payload_sums:
        return
    sums = sidecar.sums
    if sums is not None and _crc32c.crc32c(payload) != sums[local]:
        assert sidecar.checksums is not None
        check_one(payload, int(sidecar.checksums[local]), path=shard.storage.url(shard.path),
                  offset=int(sidecar.offsets[local]), record=local)
