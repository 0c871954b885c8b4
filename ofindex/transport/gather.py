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

#: The largest read that ranges are merged into (as :data:`ofindex.storage.ranges.
#: DEFAULT_MAX_BYTES`).
MERGED_BYTES = 16 << 20
#: Where the bytes of each range go: ``sink(k, bytes of range k)``, as each arrives.
RangeSink = Callable[[int, bytes | memoryview], None]


class RangeSource(Protocol):
    """What a round of range reads needs of its storage (an
    :class:`~ofindex.storage.remote.FsspecStorage`): its bounds, its retry policy and
    counters, and its two kinds of request."""

    protocol: str
    default_max_gap: int
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


class _Round:
    """The requests of one round of ranges: how they split into multi-range requests and
    lone ones, its bounds, and its hedger (every request retried and hedged)."""

    def __init__(self, storage: RangeSource, fs: Any, paths: list[str], starts: list[int],
                 ends: list[int], min_groups: int = multirange.MIN_GROUPS) -> None:
        self.storage, self.fs = storage, fs
        self.paths, self.starts, self.ends = list(paths), list(starts), list(ends)
        self.limits = Limits(storage.max_concurrency, storage.max_inflight_bytes)
        self.groups: list[list[int]] = []
        self.todo = list(range(len(paths)))
        if storage.protocol in HTTP_PROTOCOLS and len(paths) > 1:
            self.groups, self.todo = multirange.split_requests(paths, starts, ends, storage.url,
                                                               min_groups=min_groups)
        self.hedger = Hedger(storage.retry, len(self.groups) + len(self.todo),
                             storage.count_hedge)

    def fetch(self, k: int) -> Awaitable[bytes]:
        """Range ``k`` in a request of its own."""
        storage, path, start, end = self.storage, self.paths[k], self.starts[k], self.ends[k]
        return retry_async(
            lambda: self.hedger.run(lambda: storage.fetch_range(self.fs, path, start, end)),
            storage.retry, storage.describe_range(path, start, end), storage.count_retry,
            storage.pacer(path))

    def multi(self, path: str, spans: list[tuple[int, int]],
              deliver: Callable[[int, memoryview], None]) -> Awaitable[Any]:
        """Ranges of one file in one multi-range request."""
        storage = self.storage
        return retry_async(
            lambda: self.hedger.run(lambda: storage.fetch_file_ranges(self.fs, path, spans,
                                                                      deliver)),
            storage.retry, f"{storage.url(path)}: {len(spans)} ranges in one request",
            storage.count_retry, storage.pacer(path))

    async def run(self, sink: RangeSink, fetch: Callable[[int], Awaitable[bytes]],
                  failures: dict[int, BaseException] | None = None,
                  merge_gap: int | None = None) -> None:
        """The multi-range requests and the lone ranges at once, then the ranges a
        multi-range answer did not hold, one request each, or merged through gaps of up to
        ``merge_gap`` bytes (see :func:`multirange.fetch_groups` for ``failures``)."""
        storage = self.storage

        def each(todo: list[int], into: RangeSink = sink) -> Awaitable[None]:
            return fetch_each(todo, lambda k: self.ends[k] - self.starts[k], fetch, into,
                              self.limits, storage.max_concurrency)

        left, _ = await asyncio.gather(
            multirange.fetch_groups(self.groups, self.paths, self.starts, self.ends, sink,
                                    url_of=storage.url, request=self.multi, limit=self.limits,
                                    failures=failures),
            each(self.todo))
        if merge_gap is None or len(left) < 2:
            await each(left)
            return
        reads, into = self._merged(left, merge_gap, sink)
        await each(reads, into)

    def _merged(self, left: list[int], gap: int, sink: RangeSink) -> tuple[list[int], RangeSink]:
        """Reads covering ranges ``left`` through gaps of up to ``gap`` bytes, at most
        :data:`MERGED_BYTES` each (appended as ranges of this round), and the sink that hands
        each range its part of them."""
        first = len(self.paths)
        members: list[list[tuple[int, int]]] = []
        for k in sorted(left, key=lambda k: (self.paths[k], self.starts[k])):
            path, start, end = self.paths[k], self.starts[k], self.ends[k]
            last = len(self.paths) - 1
            if members and self.paths[last] == path and start - self.ends[last] <= gap \
                    and max(end, self.ends[last]) - self.starts[last] <= MERGED_BYTES:
                self.ends[last] = max(end, self.ends[last])
            else:
                self.paths.append(path)
                self.starts.append(start)
                self.ends.append(end)
                members.append([])
            members[-1].append((k, start - self.starts[-1]))

        def into(read: int, data: bytes | memoryview) -> None:
            view = memoryview(data)
            for k, offset in members[read - first]:
                sink(k, view[offset : offset + self.ends[k] - self.starts[k]])

        return list(range(first, len(self.paths))), into


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
    requests = _Round(storage, fs, paths, starts, ends)
    # ranges a server did not serve in multi-range requests are read as a single-range store's
    # are: through the gaps a request is worth (they were planned for multi-range requests)
    await requests.run(sink, requests.fetch, merge_gap=storage.default_max_gap)


async def gather_results(storage: RangeSource, fs: Any,
                         ranges: list[tuple[str, int, int]]) -> list[bytes | BaseException]:
    """Fetch every range as :func:`gather_ranges` does (the ranges of one file in one
    multi-range request over HTTP), but let each fail on its own: for rounds whose requests
    do not depend on each other (:meth:`FsspecStorage.fetch_round`).

    Args:
        storage: The storage.
        fs: Its filesystem (async).
        ranges: ``(path, start, end)`` of each range.

    Returns:
        The bytes of each range, or the exception raised for it (a missing file, a short
        read...).
    """
    out: list[bytes | BaseException] = [b""] * len(ranges)
    failures: dict[int, BaseException] = {}

    def sink(k: int, data: bytes | memoryview) -> None:
        out[k] = data if isinstance(data, bytes) else bytes(data)

    requests = _Round(storage, fs, [p for p, _, _ in ranges], [s for _, s, _ in ranges],
                      [e for _, _, e in ranges], min_groups=1)  # pieces of index: small

    async def alone(k: int) -> bytes:
        try:
            return await requests.fetch(k)
        except Exception as exc:  # this range's result; the others go on
            failures[k] = exc
            return b""

    await requests.run(sink, alone, failures)
    for k, exc in failures.items():
        out[k] = exc
    return out
