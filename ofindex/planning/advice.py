"""Which shuffle reaches a target throughput under a store's request-rate limit, and what it
costs: ``ofindex plan`` and :func:`plan_shuffle`.

For each candidate order (the full global shuffle, then block shuffles of growing block size)
the plan takes the requests one reader makes per batch (:mod:`.requests`: the library's read
planner on the batches the order gives a reader), the time a batch takes a reader alone
(round trips and bytes), and so the request rate all readers ask of the store. Under the limit
the readers run at their own speed; over it, every reader's pacer
(:mod:`ofindex.transport.policy`) holds them together at the limit (``tools/bench_ratelimit.py``
measures how near), so records/s = limit / requests per record. Each candidate's mixing is
measured on the order itself (:func:`ofindex.shuffle.neighbour_mixing`). The plan picks the
best-mixed candidate that reaches the target (:func:`choose`: candidates whose mixing is as
good within the measure's own spread count as equal, and the fastest of them is taken).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from ..cache.chain import DEFAULT_CACHE_BYTES
from ..shuffle import BlockShuffleOrder, GlobalShuffleOrder, Mixing, neighbour_mixing
from .requests import BatchRequests, DatasetShape, batch_requests, reader_batches
from .stores import StoreLimits

__all__ = ["BLOCK_SIZES", "Candidate", "ShufflePlan", "choose", "plan_for", "plan_shuffle",
           "scopes_of"]

#: Block sizes tried (records), with the block shuffle's default window of 16 blocks.
BLOCK_SIZES = (16, 64, 256, 1024, 4096, 16384)
#: Batches of one reader the request model looks at (at least, and at most).
SAMPLE_BATCHES = 16
MAX_SAMPLE_BATCHES = 256
#: Neighbouring pairs the mixing is measured on (every pair for smaller datasets).
MIXING_SAMPLE = 1 << 16


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One order, and what it gives and costs.

    Attributes:
        order: ``global`` or ``block``.
        block_size: Records per block (``None`` for the global shuffle).
        window: Blocks per shuffling window.
        per_batch: One reader's requests and bytes per batch.
        batch_seconds: A batch's time for a reader alone.
        demand: Requests per second all readers would send unthrottled.
        limit: Requests per second the store answers over the dataset's scopes.
        records_per_s: Records per second all readers read (under the limit).
        requests_per_s: Requests per second the store answers them.
        mixing: How well the order mixes (1.0 = the full shuffle).
        dollars_per_million: Price of the requests of a million records.
        moved_per_useful: Bytes moved per byte of record.
    """

    order: str
    block_size: int | None
    window: int
    per_batch: BatchRequests
    batch_seconds: float
    demand: float
    limit: float
    records_per_s: float
    requests_per_s: float
    mixing: Mixing
    dollars_per_million: float
    moved_per_useful: float

    @property
    def throttled(self) -> bool:
        """The readers would ask more than the store answers."""
        return self.demand > self.limit

    @property
    def name(self) -> str:
        return "global" if self.block_size is None else f"block {self.block_size}"


@dataclasses.dataclass(frozen=True)
class ShufflePlan:
    """The candidates, and the one chosen.

    Attributes:
        store: The store's limits used.
        readers: Reader processes.
        batch_size: Records per batch of a reader.
        target: Records per second wanted (all readers).
        candidates: Every order considered, the global shuffle first.
        chosen: The best-mixed candidate reaching ``target`` (:func:`choose`); ``None`` when
            none does.
    """

    store: StoreLimits
    readers: int
    batch_size: int
    target: float
    candidates: list[Candidate]
    chosen: Candidate | None

    def advice(self) -> str:
        """The plan in words: what to use, or why nothing reaches the target."""
        if self.chosen is not None:
            c = self.chosen
            if c.block_size is None:
                how = "GlobalShuffleSampler(ds) (the full shuffle)"
            else:
                how = (f"BlockShuffleSampler(ds, block_size={c.block_size}, "
                       f"window={c.window})")
            return (f"use {how}: {c.records_per_s:,.0f} records/s, mixing {c.mixing.value:.3g}, "
                    f"${c.dollars_per_million:.4f} per million records")
        best = max(self.candidates, key=lambda c: c.records_per_s)
        return (f"no order reaches {self.target:,.0f} records/s: the best, {best.name}, reads "
                f"{best.records_per_s:,.0f} (fewer readers per prefix, more prefixes or "
                "larger batches raise it)")

    def table(self) -> list[dict[str, object]]:
        """One row per candidate (JSON-ready)."""
        return [{"order": c.name, "block_size": c.block_size, "window": c.window,
                 "requests_per_batch": round(c.per_batch.requests, 2),
                 "batch_ms": round(c.batch_seconds * 1e3, 2),
                 "records_per_s": round(c.records_per_s, 1),
                 "requests_per_s": round(c.requests_per_s, 1),
                 "throttled": c.throttled, "mixing": c.mixing.value,
                 "mixing_stderr": c.mixing.stderr,
                 "dollars_per_million_records": round(c.dollars_per_million, 6),
                 "moved_per_useful": round(c.moved_per_useful, 3)} for c in self.candidates]


def _candidate(shape: DatasetShape, block_size: int | None, window: int, store: StoreLimits,
               readers: int, batch_size: int, concurrency: int, cache_bytes: int,
               seed: int) -> Candidate:
    n = shape.records
    order: GlobalShuffleOrder | BlockShuffleOrder
    if block_size is None:
        order = GlobalShuffleOrder(n, seed=seed)
    else:
        order = BlockShuffleOrder(shape.shard_records.tolist(), block_size, window, seed=seed)
    # enough consecutive batches to cover two windows of a block shuffle (the pages of a
    # window's blocks are reused by its batches), within bounds
    span = 2 * window * (block_size or 1) * readers // batch_size
    batches = reader_batches(order, n, readers, batch_size,
                             min(MAX_SAMPLE_BATCHES, max(SAMPLE_BATCHES, span)))
    cost = batch_requests(shape, batches, store, cache_bytes)
    records = sum(len(b) for b in batches) / max(1, len(batches))
    seconds = max(cost.seconds(store, concurrency), 1e-9)
    demand = readers * cost.requests / seconds
    limit = store.reads_per_second * shape.scopes
    if demand <= limit:
        records_per_s, requests_per_s = readers * records / seconds, demand
    else:  # the pacers hold the readers at the limit
        records_per_s, requests_per_s = limit * records / cost.requests, limit
    sample = None if n <= MIXING_SAMPLE else MIXING_SAMPLE
    per_record = cost.requests / records
    moved = (cost.data_bytes + cost.index_bytes) / max(cost.useful_bytes, 1.0)
    return Candidate("global" if block_size is None else "block", block_size, window, cost,
                     seconds, demand, limit, records_per_s, requests_per_s,
                     neighbour_mixing(order, sample=sample, seed=seed),
                     store.dollars(per_record * 1e6), moved)


def plan_shuffle(shape: DatasetShape, store: StoreLimits, readers: int, target: float, *,
                 batch_size: int = 256, concurrency: int = 64, window: int = 16,
                 block_sizes: Sequence[int] = BLOCK_SIZES,
                 cache_bytes: int = DEFAULT_CACHE_BYTES, seed: int = 0) -> ShufflePlan:
    """Choose the shuffle that reaches ``target`` records/s under ``store``'s limits.

    Args:
        shape: The dataset's shards (:meth:`DatasetShape.of`).
        store: The store's limits (:func:`~ofindex.planning.stores.store_limits`).
        readers: Reader processes (ranks times workers) reading at once.
        target: Records per second wanted, all readers together.
        batch_size: Records each reader asks for at once.
        concurrency: Requests a reader has in flight (``ofindex.open(max_concurrency=)``).
        window: Blocks per shuffling window of the block shuffles.
        block_sizes: Block sizes tried.
        cache_bytes: Each process's sidecar page cache (``ofindex.open(cache_bytes=)``).
        seed: The orders' seed.

    Returns:
        The plan: every candidate, and the best-mixed one reaching the target.

    Raises:
        ValueError: ``readers``, ``batch_size``, ``concurrency`` or ``window`` below 1, more
            readers than records, or a target that is not positive.
    """
    if min(readers, batch_size, concurrency, window) < 1:
        raise ValueError("readers, batch_size, concurrency and window must be at least 1")
    if readers > shape.records:  # each reader's share of an epoch would be empty
        raise ValueError(f"{readers:,} readers for a dataset of {shape.records:,} records: "
                         "some would read nothing; plan for at most as many readers as "
                         "records")
    if not target > 0 or math.isnan(target):
        raise ValueError(f"target must be a positive number of records per second, not {target}")
    sizes: list[int | None] = [None, *sorted({int(b) for b in block_sizes if b >= 1})]
    candidates = [_candidate(shape, b, window, store, readers, batch_size, concurrency,
                             cache_bytes, seed) for b in sizes]
    reaching = [c for c in candidates if c.records_per_s >= target]
    return ShufflePlan(store, readers, batch_size, target, candidates, choose(reaching))


#: How many standard deviations of the mixing measure two candidates may differ by and still
#: count as mixed as well as each other (:func:`choose`).
MIXING_TIE_SIGMAS = 3.0


def mixing_spread(mixing: Mixing) -> float:
    """The standard deviation of a full shuffle's mixing measured on as many pairs as
    ``mixing`` was: for a random order each pair's ``|position(i + 1) - position(i)| / (n / 3)``
    has mean 1 and variance 1/2, so the mean of ``pairs`` of them varies by ``sqrt(1/2 /
    pairs)`` (0.4 % on 31,000 records); a sampled measure adds its own standard error.

    Args:
        mixing: A measure of :func:`~ofindex.shuffle.neighbour_mixing`.

    Returns:
        Its spread, in the measure's units (1.0 = the full shuffle's mean).
    """
    return math.sqrt(0.5 / max(1, mixing.pairs)) + mixing.stderr


def choose(reaching: Sequence[Candidate]) -> Candidate | None:
    """The plan's choice among the candidates that reach the target: the best mixed, where
    candidates whose mixing is below the best by no more than :data:`MIXING_TIE_SIGMAS`
    spreads of the measure (:func:`mixing_spread`) count as mixed as well, and of those the
    fastest (then the cheapest, then the full shuffle: the simplest). A block shuffle whose
    blocks the window mixes as fully as the full shuffle is thus not chosen over it for a
    measure a noise higher.

    Args:
        reaching: The candidates that reach the target.

    Returns:
        The chosen candidate, or ``None`` when there is none.
    """
    if not reaching:
        return None
    best = max(reaching, key=lambda c: c.mixing.value)
    tied = [c for c in reaching if best.mixing.value - c.mixing.value <= MIXING_TIE_SIGMAS
            * max(mixing_spread(best.mixing), mixing_spread(c.mixing))]
    return max(tied, key=lambda c: (c.records_per_s, -c.dollars_per_million,
                                    c.block_size is None))


def scopes_of(urls: Sequence[str], store: StoreLimits) -> int:
    """How many limits a dataset's files fall under: distinct prefixes (the URL up to its
    last ``/``) for a store limited per prefix, distinct buckets for one limited per bucket.

    Args:
        urls: The data files.
        store: The store.

    Returns:
        At least 1.
    """
    if store.scope == "prefix":
        keys = {u.rsplit("/", 1)[0] for u in urls}
    elif store.scope == "bucket":
        keys = {u.split("://", 1)[-1].split("/", 1)[0] for u in urls}
    else:
        keys = set()
    return max(1, len(keys))


def plan_for(paths: str | Sequence[str], readers: int, target: float, *,
             store: str | None = None, storage_options: dict[str, object] | None = None,
             index_dir: str | None = None, limits: dict[str, float | None] | None = None,
             allow_missing_shards: bool = False, **settings: object) -> ShufflePlan:
    """:func:`plan_shuffle` for a dataset on disk or in a bucket: its shards' record counts and
    sizes come from its manifest or sidecars (nothing else is read).

    Args:
        paths: The dataset, as for :func:`ofindex.open`.
        readers: Reader processes (ranks times workers) reading at once.
        target: Records per second wanted, all readers together.
        store: ``s3``, ``gcs``, ``http`` or ``local``; ``None``: from the URL.
        storage_options: fsspec options for opening the dataset.
        index_dir: Where its sidecars are, when not in the default place.
        limits: Figures of the store to override (:func:`~.stores.store_limits`:
            ``reads_per_second``, ``dollars_per_1000``, ``rtt``, ``bandwidth``, ``max_gap``).
        allow_missing_shards: Plan for a set lacking shards, as :func:`ofindex.open` takes it.
        **settings: Further keyword arguments of :func:`plan_shuffle` (``batch_size``,
            ``concurrency``, ``window``, ``block_sizes``, ``cache_bytes``, ``seed``).

    Returns:
        The plan.

    Raises:
        ValueError: A setting out of range, or an unknown store.
        IndexNotFoundError: The dataset has no index (run ``ofindex build`` first).
    """
    from ..opening import open as open_dataset
    from .stores import store_for_url, store_limits

    ds = open_dataset(paths, storage_options=storage_options, index_dir=index_dir,
                      allow_missing_shards=allow_missing_shards)
    try:
        shards = ds.shards
    finally:
        ds.close()
    urls = [s.url for s in shards]
    chosen = store_limits(store or store_for_url(urls[0]), **(limits or {}))
    shape = DatasetShape.of([s.records for s in shards], [s.bytes for s in shards],
                            scopes_of(urls, chosen))
    return plan_shuffle(shape, chosen, readers, target, **settings)  # type: ignore[arg-type]
