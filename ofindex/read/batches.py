"""Sequential reading in batches (``Dataset.iter_batches``): a list of payloads per batch, or
one buffer of payloads back to back per batch (:class:`RecordBatch`).

Memory-mapped shards with the compiled module are cut by :mod:`.mapped_batches`. Elsewhere
(remote storage, ``mmap=False``, compressed shards, pure Python) the shards are streamed with
large reads and regrouped here.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from .. import _accel
from ..errors import RecordIndexError
from . import compressed_stream, mapped_batches, streaming
from .record_batch import RecordBatch, finish_batch

__all__ = ["RecordBatch", "iter_batches", "shard_blocks"]

#: An ofindex ``Dataset`` (not imported here: it imports this module).
Dataset = Any


def iter_batches(ds: Dataset, batch_size: int, start: int, stop: int | None,
                 as_buffer: bool, block_bytes: int) -> Iterator[Any]:
    """The batches of :meth:`Dataset.iter_batches` (its arguments are documented there)."""
    if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"batch_size must be a whole number >= 1, got {batch_size!r}")
    batch_size = int(batch_size)
    n = len(ds)
    stop = n if stop is None else min(stop, n)
    if start < 0 or start > stop:
        raise RecordIndexError(f"iteration range [{start}, {stop}) is invalid for a dataset "
                               f"of {n} records")
    if _accel.native is not None and ds._storage.maps_files and not ds._compressed:
        yield from mapped_batches.mapped(ds, batch_size, start, stop, as_buffer, _streamed)
        return
    # streamed shard by shard: a compressed shard is inflated once, its gzip CRC32 / zlib
    # Adler-32 checked at the end of a whole pass
    yield from _regrouped(ds, batch_size, start, stop, as_buffer, block_bytes)


def _regrouped(ds: Dataset, batch_size: int, start: int, stop: int, as_buffer: bool,
               block_bytes: int) -> Iterator[Any]:
    """Batches regrouped from the streamed blocks of each shard."""
    pending: list[Any] = []
    first = start
    for s, shard in enumerate(ds._shards):
        lo = max(start - int(ds._first[s]), 0)
        hi = min(stop - int(ds._first[s]), shard.records)
        if lo >= hi:
            continue
        for block in shard_blocks(ds, s, lo, hi, block_bytes):
            pending += block
            k = 0
            while len(pending) - k >= batch_size:
                yield finish_batch(ds, pending[k:k + batch_size], first, as_buffer)
                first += batch_size
                k += batch_size
            del pending[:k]
    if pending:
        yield finish_batch(ds, pending, first, as_buffer)


def shard_blocks(ds: Dataset, s: int, lo: int, hi: int,
                 block_bytes: int = 8 << 20) -> Iterator[list[bytes]]:
    """Payloads of records ``lo..hi-1`` of shard ``s``, in order, a list at a time: streamed
    with large reads, or inflated once from the start for a compressed shard."""
    shard = ds._shards[s]
    sc = shard.sidecar
    if not sc.compressed:
        yield from streaming.stream_blocks(ds._storage, shard.path, sc, lo, hi, ds.verify,
                                           block_bytes)
        return
    records = compressed_stream.stream_compressed(ds._storage, shard.path, sc, lo, hi,
                                                  ds.verify, block_bytes)
    while block := list(itertools.islice(records, _INFLATED_BLOCK)):
        yield block


#: Records per list when a compressed shard is streamed.
_INFLATED_BLOCK = 4096


def _streamed(ds: Dataset, a: int, b: int) -> list[bytes]:
    """Payloads of records ``a..b-1`` read by the streaming path (no map)."""
    out: list[bytes] = []
    for s, shard in enumerate(ds._shards):
        lo = max(a - int(ds._first[s]), 0)
        hi = min(b - int(ds._first[s]), shard.records)
        if lo < hi:
            for block in shard_blocks(ds, s, lo, hi):
                out += block
    return out
