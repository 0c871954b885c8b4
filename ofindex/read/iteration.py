"""Sequential reading in batches (``Dataset.iter_batches``, and iteration): a list of payloads
per batch, or one buffer of payloads back to back (:class:`RecordBatch`).

How a run of records is read is the shards' accesses' to say (:mod:`ofindex.read.access`,
chosen once per shard; :meth:`~ofindex.read.access.ShardAccesses.iter_batches`):

* **memory-mapped shards** (:class:`~ofindex.read.access.MappedAccess`): each batch is one
  compiled call per shard it touches, over spans planned for many batches at once; with a
  core to spare, a compiled thread checks the CRCs of small records ahead of the list being
  made, and lists of a MB or more are copied and checked on the pool's threads one list
  ahead of the one handed out (:mod:`.sequential.mapped_batches`: lists of 1,024 x ~200 B at 13-14 M
  records/s);
* **every other access** (remote storage, ``mmap=False``, compressed shards, pure Python),
  and shards read in different ways: each shard is streamed by its access with large
  sequential reads (:meth:`~ofindex.read.access.ShardAccess.blocks`; a compressed shard is
  inflated once from the start, its gzip CRC32 / zlib Adler-32 checked at the end of a
  whole pass) and the records are regrouped into batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..errors import RecordIndexError
from .access import ShardAccesses
from .batch_source import BatchSource

#: Iteration one record at a time (``for record in ds``) goes through lists of at most this
#: many records (4096 of ~200 B: 12.2 M records/s of main-thread time, 1024: 11.5 M) ...
ITERATION_RECORDS = 4096
#: ... and about this many bytes, but not fewer than 16 records: big records are made and
#: freed a few MB at a time, so that a list's memory is the next one's (no page faults) and
#: the next list is filled while this one is handed out. Lists of 1024 records of ~100 KB
#: (100 MB each) ran at 0.3x vahidk's reader.
ITERATION_BYTES = 4 << 20
ITERATION_RECORDS_MIN = 16


def records_per_list(mean_record_bytes: float) -> int:
    """Records per list for iteration one record at a time, from their mean size."""
    fit = int(ITERATION_BYTES // max(mean_record_bytes, 1))
    return max(ITERATION_RECORDS_MIN, min(ITERATION_RECORDS, fit))


def iter_batches(src: BatchSource, accesses: ShardAccesses, batch_size: int, start: int,
                 stop: int | None, as_buffer: bool, block_bytes: int) -> Iterator[Any]:
    """The batches of :meth:`Dataset.iter_batches` (its arguments are documented there;
    ``accesses``: how each shard is read)."""
    if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"batch_size must be a whole number >= 1, got {batch_size!r}")
    batch_size = int(batch_size)
    n = len(src.table)
    stop = n if stop is None else min(stop, n)
    if start < 0 or start > stop:
        raise RecordIndexError(f"iteration range [{start}, {stop}) is invalid for a dataset "
                               f"of {n} records")
    yield from accesses.iter_batches(src, batch_size, start, stop, as_buffer, block_bytes)
