"""One round of range reads on an async fsspec filesystem: the ranges of a batch, fetched at
once within the storage's bounds on requests and bytes in flight.

Over HTTP the ranges of one file go out together in multi-range requests where the server
answers them (:mod:`.multirange`), at the same time as the ranges that go alone; ranges a
multi-range answer did not hold are then fetched one per request. Elsewhere every range is
one request.

Every request is retried by the storage's policy (:mod:`.retry`), waits for its turn at the
process's request rate to the store (:mod:`.pacing`), and each attempt is hedged
(:mod:`.hedge`): one far slower than the batch's others is sent again, the first answer wins.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from . import multirange
from .aio import HTTP_PROTOCOLS, Limits, fetch_each
from .hedge import Hedger
from .pacing import AdaptiveRate
from .retry import RetryPolicy, retry_async

#: Where the bytes of each range go: ``sink(k, bytes of range k)``, as each arrives.
RangeSink = Callable[[int, bytes | memoryview], None]


class RangeSource(Protocol):
    """What a round of range reads needs of its storage (an
    :class:`~ofindex.storage.remote.FsspecStorage`): its bounds, its retry policy and
    counters, and its two kinds of request."""

    protocol: str
    max_concurrency: int
    max_inflight_bytes: int
    retry: RetryPolicy

    def url(self, path: str) -> str: ...

    def describe_range(self, path: str, start: int, end: int) -> str: ...

    def count_retry(self) -> None: ...

    def count_hedge(self) -> None: ...

    def pacer(self, path: str) -> AdaptiveRate: ...

    async def fetch_range(self, fs: Any, path: str, start: int, end: int) -> bytes: ...

    async def fetch_file_ranges(self, fs: Any, path: str, spans: list[tuple[int, int]],
                                deliver: Callable[[int, memoryview], None]) -> int | None: ...


async def gather_ranges(storage: RangeSource, fs: Any, paths: list[str], starts: list[int],
                        ends: list[int], sink: RangeSink) -> None:
    """Fetch every range within ``storage.max_concurrency`` and ``max_inflight_bytes``.

    Args:
        storage: The storage (its ``fetch_range`` and ``fetch_file_ranges`` make the
            requests; retried and hedged by its ``retry`` policy, counted by its
            ``count_retry`` and ``count_hedge``).
        fs: Its filesystem (async).
        paths: The file of each range.
        starts: First byte of each range.
        ends: One past the last byte of each.
        sink: Called as ``sink(k, bytes of range k)`` as each arrives (from the event loop).

    Raises:
        The first failure, after retries (the other requests are cancelled).
    """
    limits = Limits(storage.max_concurrency, storage.max_inflight_bytes)
    groups: list[list[int]] = []
    todo = list(range(len(paths)))
    if storage.protocol in HTTP_PROTOCOLS and len(paths) > 1:
        groups, todo = multirange.split_requests(paths, starts, ends, storage.url)
    hedger = Hedger(storage.retry, len(groups) + len(todo), storage.count_hedge)

    def fetch(k: int) -> Awaitable[bytes]:
        return retry_async(
            lambda: hedger.run(lambda: storage.fetch_range(fs, paths[k], starts[k], ends[k])),
            storage.retry, storage.describe_range(paths[k], starts[k], ends[k]),
            storage.count_retry, storage.pacer(paths[k]))

    def multi(p: str, spans: list[tuple[int, int]],
              deliver: Callable[[int, memoryview], None]) -> Awaitable[Any]:
        return retry_async(lambda: hedger.run(
                               lambda: storage.fetch_file_ranges(fs, p, spans, deliver)),
                           storage.retry, f"{storage.url(p)}: {len(spans)} ranges in one request",
                           storage.count_retry, storage.pacer(p))

    def each(todo: list[int]) -> Awaitable[None]:
        return fetch_each(todo, lambda k: ends[k] - starts[k], fetch, sink, limits,
                          storage.max_concurrency)

    left, _ = await asyncio.gather(  # the groups and the lone ranges at once
        multirange.fetch_groups(groups, paths, starts, ends, sink, url_of=storage.url,
                                request=multi, limit=limits), each(todo))
    await each(left)
