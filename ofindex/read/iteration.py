"""Sequential reading in batches (``Dataset.iter_batches``, and iteration): a list of payloads
per batch, or one buffer of payloads back to back (:class:`RecordBatch`).

How a run of records is read is chosen in one place, :func:`iter_batches`:

* **memory-mapped shards with the compiled module** (no compressed shard): each batch is one
  compiled call per shard it touches, over spans planned for many batches at once; with a
  core to spare, a compiled thread checks the CRCs of small records ahead of the list being
  made, and lists of a MB or more are copied and checked on the pool's threads one list
  ahead of the one handed out (:mod:`.mapped_batches`: lists of 1,024 x ~200 B at 13-14 M
  records/s);
* **everything else** (remote storage, ``mmap=False``, compressed shards, pure Python): each
  shard is streamed with large sequential reads (a compressed shard is inflated once from
  the start, its gzip CRC32 / zlib Adler-32 checked at the end of a whole pass) and the
  records are regrouped into batches here.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from .. import _accel
from ..errors import RecordIndexError
from . import compressed_stream, mapped_batches, streaming
from .batch_source import BatchSource

#: Records per list when a compressed shard is streamed.
_INFLATED_BLOCK = 4096
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


def iter_batches(src: BatchSource, batch_size: int, start: int, stop: int | None,
                 as_buffer: bool, block_bytes: int, *, compressed_shards: bool) -> Iterator[Any]:
    """The batches of :meth:`Dataset.iter_batches` (its arguments are documented there;
    ``compressed_shards``: whether any shard of the dataset is compressed)."""
    if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"batch_size must be a whole number >= 1, got {batch_size!r}")
    batch_size = int(batch_size)
    n = len(src.table)
    stop = n if stop is None else min(stop, n)
    if start < 0 or start > stop:
        raise RecordIndexError(f"iteration range [{start}, {stop}) is invalid for a dataset "
                               f"of {n} records")
    if _accel.native is not None and src.table.storage.can_mmap and not compressed_shards:
        yield from mapped_batches.mapped(src, batch_size, start, stop, as_buffer, _streamed)
        return
    yield from _regrouped(src, batch_size, start, stop, as_buffer, block_bytes)


def _regrouped(src: BatchSource, batch_size: int, start: int, stop: int, as_buffer: bool,
               block_bytes: int) -> Iterator[Any]:
    """Batches regrouped from the streamed blocks of each shard."""
    pending: list[Any] = []
    first = start
    for shard_no, lo, hi in src.table.runs(start, stop):
        for block in shard_blocks(src, shard_no, lo, hi, block_bytes):
            pending += block
            k = 0
            while len(pending) - k >= batch_size:
                yield src.finish(pending[k:k + batch_size], first, as_buffer)
                first += batch_size
                k += batch_size
            del pending[:k]
    if pending:
        yield src.finish(pending, first, as_buffer)


def shard_blocks(src: BatchSource, shard_no: int, lo: int, hi: int,
                 block_bytes: int = 8 << 20) -> Iterator[list[bytes]]:
    """Payloads of records ``lo..hi-1`` of shard ``s``, in order, a list at a time: streamed
    with large reads, or inflated once from the start for a compressed shard."""
    shard = src.table.shards[shard_no]
    sidecar = shard.sidecar
    storage, verify = src.table.storage, src.checks.verify
    if not sidecar.compressed:
        yield from streaming.stream_blocks(storage, shard.path, sidecar, lo, hi, verify,
                                           block_bytes, src.data_cache)
        return
    records = compressed_stream.stream_compressed(storage, shard.path, sidecar, lo, hi,
                                                  verify, block_bytes)
    while block := list(itertools.islice(records, _INFLATED_BLOCK)):
        yield block


def _streamed(src: BatchSource, a: int, b: int) -> list[bytes]:
    """Payloads of records ``a..b-1`` read by the streaming path (no map)."""
    out: list[bytes] = []
    for shard_no, lo, hi in src.table.runs(a, b):
        for block in shard_blocks(src, shard_no, lo, hi):
            out += block
    return out
