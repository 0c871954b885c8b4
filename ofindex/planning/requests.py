"""The requests one reader makes per batch, for an order over a dataset of known shape: the
library's own read planner (:func:`ofindex.read.payloads.coalesce`, the page size of
:func:`ofindex.read.remote.pages.page_records_for`) run on the batches the order and the strided
partition give a reader, with each record's offset modelled from its shard's mean record size
(a plan reads no data: the offsets of records are not fetched).

Modelled, not measured: a record of shard ``s`` starts at ``k * bytes[s] / records[s]``;
sidecar pages missed by the process's page cache are those a batch touches that an LRU of the
cache's size, run over the reader's consecutive batches, does not hold, times the share of the
dataset's pages the cache cannot hold (a page not seen in the sample: uniform access), one
request per run of consecutive pages of a shard (as the index round merges them);
first-touch stats and headers are left out (steady state). ``tools/bench_ratelimit.py``
checks the model against the real reader on the simulated store.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from ..cache.chain import DEFAULT_CACHE_BYTES, PAGE_OVERHEAD
from ..read.payloads import DEFAULT_MAX_BYTES, coalesce
from ..read.remote.pages import WHOLE_BELOW_PAGES, page_records_for
from .stores import StoreLimits


@dataclasses.dataclass(frozen=True)
class DatasetShape:
    """Record counts and byte sizes of a dataset's shards.

    Attributes:
        shard_records: Records of each shard.
        shard_bytes: Bytes of each shard's data file.
        scopes: Prefixes (S3) or buckets (GCS) the shards lie in: each has its own limit.
    """

    shard_records: np.ndarray
    shard_bytes: np.ndarray
    scopes: int = 1

    @classmethod
    def of(cls, shard_records: Sequence[int], shard_bytes: Sequence[int],
           scopes: int = 1) -> DatasetShape:
        """A shape from per-shard counts and sizes.

        Raises:
            ValueError: The lists differ in length, or hold no record.
        """
        records = np.asarray(shard_records, dtype=np.int64).reshape(-1)
        sizes = np.asarray(shard_bytes, dtype=np.int64).reshape(-1)
        if records.shape != sizes.shape or records.sum() < 1 or (records < 0).any():
            raise ValueError("shard_records and shard_bytes must be equally long, "
                             "non-negative, with at least one record")
        return cls(records, sizes, max(1, int(scopes)))

    @property
    def records(self) -> int:
        return int(self.shard_records.sum())

    @property
    def bytes(self) -> int:
        return int(self.shard_bytes.sum())


@dataclasses.dataclass(frozen=True)
class BatchRequests:
    """What one reader's batch costs, averaged over the sampled batches.

    Attributes:
        data_requests: Range requests for the records.
        index_requests: Sidecar page requests missed by the page cache.
        data_bytes: Bytes the data requests move.
        index_bytes: Bytes the page requests move.
        useful_bytes: Bytes of the records themselves.
    """

    data_requests: float
    index_requests: float
    data_bytes: float
    index_bytes: float
    useful_bytes: float

    @property
    def requests(self) -> float:
        return self.data_requests + self.index_requests

    def seconds(self, store: StoreLimits, concurrency: int) -> float:
        """Time of the batch for a reader alone: per round (the pages, then the data),
        ``ceil(requests / concurrency)`` round trips plus its bytes at the bandwidth."""
        total = 0.0
        for requests, moved in ((self.index_requests, self.index_bytes),
                                (self.data_requests, self.data_bytes)):
            if requests > 0:
                total += math.ceil(requests / concurrency) * store.rtt + moved / store.bandwidth
        return total


def reader_batches(order_at: object, n: int, readers: int, batch: int, count: int,
                   rank: int = 0) -> list[np.ndarray]:
    """The first ``count`` batches of reader ``rank`` of ``readers``: epoch positions
    ``j * readers + rank`` (the strided split of :mod:`ofindex.shuffle.partition`), mapped to
    records by ``order_at`` (an order's ``__call__``)."""
    per_reader = n // readers
    out = []
    for b in range(min(count, max(1, per_reader // batch))):
        j = np.arange(b * batch, min((b + 1) * batch, per_reader), dtype=np.int64)
        if j.size:
            out.append(np.asarray(order_at(j * readers + rank), dtype=np.int64))  # type: ignore[operator]
    return out


def batch_requests(shape: DatasetShape, batches: list[np.ndarray], store: StoreLimits,
                   cache_bytes: int = DEFAULT_CACHE_BYTES, warm: int = 0) -> BatchRequests:
    """Requests and bytes of each batch, averaged (see the module for the model).

    Args:
        shape: The dataset.
        batches: Consecutive batches of one reader (record indices).
        store: The store (its ``max_gap``).
        cache_bytes: The process's page cache.
        warm: The first ``warm`` batches only fill the page cache (not averaged).

    Returns:
        The mean cost of a batch.
    """
    records, sizes = shape.shard_records, shape.shard_bytes
    cum = np.concatenate([[0], np.cumsum(records)])
    mean = sizes / np.maximum(records, 1)
    pages = np.array([page_records_for(int(r), int(b)) for r, b in zip(records, sizes,
                                                                      strict=True)])
    whole = records <= WHOLE_BELOW_PAGES * pages
    total_pages = float(np.sum(np.ceil(records / pages)[~whole]))
    held = cache_bytes / (8.0 * float(np.mean(pages)) + PAGE_OVERHEAD)
    miss = 1.0 - min(1.0, held / total_pages) if total_pages else 0.0
    rows = []
    lru: collections.OrderedDict[tuple[int, int], None] = collections.OrderedDict()
    for idx in batches:
        shard = np.searchsorted(cum, idx, side="right") - 1
        local = idx - cum[shard]
        starts = np.floor(local * mean[shard]).astype(np.int64)
        ends = np.floor((local + 1) * mean[shard]).astype(np.int64)
        plan = coalesce(starts, ends, store.max_gap, DEFAULT_MAX_BYTES, files=shard)
        paged = ~whole[shard]
        touched = set(zip(shard[paged].tolist(), (local[paged] // pages[shard[paged]]).tolist(),
                          strict=True))
        fresh = []
        for key in touched:  # the page cache: pages of the batches just before are held
            if key in lru:
                lru.move_to_end(key)
            else:
                fresh.append(key)
                lru[key] = None
        while len(lru) > held:
            lru.popitem(last=False)
        page_bytes = 8.0 * float(np.mean(pages[shard[paged]])) if paged.any() else 0.0
        rows.append((len(plan.fetch_starts), _runs(fresh) * miss, plan.bytes_fetched,
                     len(fresh) * miss * page_bytes, float(np.sum(ends - starts))))
    mean_row = np.mean(np.array(rows[warm:] or rows, dtype=np.float64), axis=0)
    return BatchRequests(*(float(v) for v in mean_row))


def _runs(pages: list[tuple[int, int]]) -> int:
    """Requests for missing pages: one per run of consecutive pages of a shard, as the index
    round merges them."""
    ordered = sorted(pages)
    return sum(1 for k, (shard, page) in enumerate(ordered)
               if k == 0 or ordered[k - 1] != (shard, page - 1))
