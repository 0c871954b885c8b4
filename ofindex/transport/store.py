"""The requests of one remote storage to its store (:class:`StoreClient`): each under the
storage's policy (:mod:`.policy`: retried, within its deadline, paced, hedged in a batch),
checked (exactly the bytes asked for) and counted, and rounds of range reads run at once
within bounds on requests and bytes in flight.

Reads go through fsspec's public API (its async filesystems' coroutines, many at once on its
event loop), never a buffered ``open()`` whose readahead multiplies small random reads; over
HTTP through our own client (:mod:`.http`), which checks each answer's status,
``Content-Range`` and ``ETag``. Over HTTP the ranges of one file in a round go out together in
multi-range requests (:func:`split_requests`): on a busy client most of what a request costs
is CPU (building, sending and parsing it), not bytes, so a batch of random reads then costs a
few requests instead of one per range. Object stores do not answer them (S3's GetObject serves
one range per request): a host that answers a multi-range GET with the whole file (its body is
not read), with fewer ranges than asked, or with a body that cannot be parsed (logged) is
remembered as a single-range host for the rest of the process (:data:`SUPPORT`), and the
ranges it did not serve are read one per request, merged through the gaps a single-range
request is worth. A host not tried yet is taken to answer them, as most web servers do (nginx,
Apache, Caddy…). Every part is checked against the ranges asked for: never wrong bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

from ..errors import DataFileNotFoundError, RangeReadError
from .clients import HTTP_PROTOCOLS, ORPHANS, call, shared_filesystem, shared_http_client
from .http import HttpClient, StampCheck
from .policy import AdaptiveRate, Counts, Hedger, RequestPolicy, pacer_for

T = TypeVar("T")
log = logging.getLogger(__name__)

#: The longest ``Range`` header sent (characters): nginx and Apache accept header lines of
#: 8 KiB by default.
MAX_RANGE_HEADER = 6000
#: A request carries about this many bytes of ranges at most, so that a batch is split into
#: a few requests whose responses arrive (and are worked on) one after another.
GROUP_BYTES = 4 << 20
#: ... and a batch of several ranges goes out in at least this many requests.
MIN_GROUPS = 4
#: The gap read through between ranges of a host that answers multi-range requests (instead
#: of the storage's ``default_max_gap``): about what a part costs in headers and parsing.
MULTI_RANGE_GAP = 16 << 10
#: The largest read that ranges left by a multi-range answer are merged into.
MERGED_BYTES = 16 << 20
#: host -> whether it answered a multi-range GET with parts (absent: not tried yet).
SUPPORT: dict[str, bool] = {}

#: Where the bytes of each range go: ``sink(k, bytes of range k)``, as each arrives.
RangeSink = Callable[[int, bytes | memoryview], None]
#: The stamp check of each file's reads (:data:`.http.StampCheck`), or ``None``.
CheckOf = Callable[[str], "StampCheck | None"]


def host_of(url: str) -> str:
    """The scheme and host of ``url``: the key of :data:`SUPPORT`."""
    got = urlsplit(url)
    return f"{got.scheme}://{got.netloc}"


class StoreClient:
    """The requests of one storage (a protocol and its options) in this process.

    Args:
        protocol: The fsspec protocol.
        options: Its storage options.
        policy: How requests are retried, bounded, paced and hedged.
        max_concurrency: Requests of a round at once.
        max_inflight_bytes: Response bytes held at once (a larger range runs alone).
        counts: Where requests, bytes, retries and hedges are counted (reset in a new
            process).
    """

    def __init__(self, protocol: str, options: dict[str, Any], policy: RequestPolicy, *,
                 max_concurrency: int, max_inflight_bytes: int, merge_gap: int,
                 counts: Counts) -> None:
        self.protocol, self.options, self.policy = protocol, options, policy
        self.max_concurrency, self.max_inflight_bytes = max_concurrency, max_inflight_bytes
        self.merge_gap, self.counts = merge_gap, counts
        self.http = protocol in HTTP_PROTOCOLS
        self._fs: Any = None
        self._http: HttpClient | None = None
        self._pid = -1
        self._lock = threading.Lock()

    @property
    def fs(self) -> Any:
        """This process's fsspec filesystem of the protocol and options (taken on first use in
        each process; shared with the other storages of the same filesystem)."""
        fs = self._fs
        if fs is not None and self._pid == os.getpid():
            return fs
        with self._lock:
            if self._fs is not None and self._pid != os.getpid():
                ORPHANS.append(self._fs)  # the parent's: never finalize it here
                self._fs = None
            if self._fs is None:
                self._fs = shared_filesystem(self.protocol, self.options, self.max_concurrency)
                self._http = shared_http_client(self.options) if self.http else None
                self._pid = os.getpid()
                counts = self.counts
                counts.requests = counts.bytes_read = counts.retries = counts.hedged = 0
            return self._fs

    def url(self, path: str) -> str:
        """``path`` as a URL, for messages."""
        if self.http or "://" in path:
            return path
        return f"{self.protocol}://{path}"

    def run(self, coro: Awaitable[T]) -> T:
        """The result of ``coro``, run on the filesystem's event loop (fsspec's, for a
        synchronous filesystem) from synchronous code."""
        from fsspec.asyn import get_loop, sync

        async def wait() -> T:
            return await coro

        got: T = sync(getattr(self.fs, "loop", None) or get_loop(), wait)
        return got

    @property
    def http_client(self) -> HttpClient:
        """This process's HTTP client of the options (HTTP storages only)."""
        self.fs  # noqa: B018 (this process's clients)
        assert self._http is not None
        return self._http

    def pacer(self, path: str) -> AdaptiveRate:
        """This process's request rate to the bucket or host of ``path``."""
        return pacer_for(self.protocol, self.url(path))

    def multirange(self, path: str) -> bool | None:
        """Whether the host of ``path`` answers multi-range requests (``None``: not tried
        yet); always ``False`` off HTTP."""
        return SUPPORT.get(host_of(self.url(path))) if self.http else False

    def remember_multirange(self, path: str, answers: bool) -> None:
        """Remember whether the host of ``path`` answers multi-range requests."""
        SUPPORT[host_of(self.url(path))] = answers

    async def request(self, path: str, what: str, attempt: Callable[[], Awaitable[T]],
                      hedger: Hedger | None = None) -> T:
        """``await attempt()`` under the policy (naming ``what``; paced as ``path``'s store)."""
        return await self.policy.run(attempt, what, pacer=self.pacer(path), counts=self.counts,
                                     hedger=hedger)

    async def call(self, path: str, action: str, method: str, *args: Any,
                   **kwargs: Any) -> Any:
        """The filesystem's ``method`` on ``path`` under the policy (see :func:`.clients.call`);
        ``action`` names it in messages."""
        fs = self.fs
        return await self.request(path, f"{self.url(path)}: {action}",
                                  lambda: call(fs, method, path, *args, **kwargs))

    async def read_file(self, path: str) -> bytes:
        """The whole content of ``path`` (one request, retried; counted)."""
        data: bytes = await self.call(path, "whole file", "cat_file")
        self.counts.requests += 1
        self.counts.bytes_read += len(data)
        return data

    async def read_range(self, path: str, start: int, end: int, check: StampCheck | None = None,
                         hedger: Hedger | None = None) -> bytes:
        """Exactly the bytes ``[start, end)`` of ``path`` in one request (retried, checked,
        counted; over HTTP ``check`` is given the response's headers).

        Raises:
            DataFileNotFoundError: The file does not exist.
            RangeReadError: The store kept failing, or answered other bytes.
        """
        fs, url = self.fs, self.url(path)

        async def attempt() -> bytes:
            try:
                if self._http is not None:
                    data = await self._http.get_range(path, start, end, check)
                else:
                    data = await call(fs, "cat_file", path, start=start, end=end)
            except FileNotFoundError:
                raise DataFileNotFoundError(f"{url}: data file not found") from None
            self.counts.requests += 1
            self.counts.bytes_read += len(data)
            if len(data) != end - start:
                raise RangeReadError(
                    f"{url}: asked for bytes [{start}, {end}) ({end - start} bytes) but the "
                    f"storage returned {len(data)} bytes; the server may ignore Range "
                    "requests, or the file changed — refusing to return wrong data")
            return data

        return await self.request(path, f"{url}: bytes [{start}, {end})", attempt, hedger)

    async def read_spans(self, path: str, spans: Sequence[tuple[int, int]],
                         deliver: Callable[[int, memoryview], None],
                         check: StampCheck | None = None,
                         hedger: Hedger | None = None) -> int | None:
        """Ranges of one file in one multi-range request over HTTP (retried), each handed to
        ``deliver(j, data)`` as it arrives (again by a retry: the caller keeps the first);
        returns the bytes moved, or ``None`` when the answer held no parts (a malformed
        answer is logged and counts as one without parts).

        Raises:
            DataFileNotFoundError: The file does not exist.
        """
        client, url = self.http_client, self.url(path)

        async def attempt() -> int | None:
            try:
                got = await client.get_spans(path, spans, deliver, check)
            except FileNotFoundError:
                raise DataFileNotFoundError(f"{url}: data file not found") from None
            except RangeReadError as exc:  # the spans not delivered are read one by one
                log.warning("%s", exc)
                got = None
            self.counts.requests += 1
            self.counts.bytes_read += got or 0
            return got

        return await self.request(path, f"{url}: {len(spans)} ranges in one request", attempt,
                                  hedger)

    async def read_ranges(self, paths: Sequence[str], starts: Sequence[int],
                          ends: Sequence[int], sink: RangeSink, check_of: CheckOf) -> None:
        """Read every range within the bounds on requests and bytes in flight.

        Args:
            paths: The file of each range.
            starts: First byte of each range.
            ends: One past the last byte of each.
            sink: Called as ``sink(k, bytes of range k)`` as each arrives (from the event
                loop).
            check_of: The stamp check of each file's answers.

        Raises:
            The first failure, after retries (the other requests are cancelled).
        """
        requests = _Round(self, paths, starts, ends, check_of)
        # ranges a server did not serve in multi-range requests are read as a single-range
        # store's are: through the gaps a request is worth (they were planned for multi-range
        # requests)
        await requests.run(sink, requests.fetch, merge_gap=self.merge_gap)

    async def read_results(self, ranges: Sequence[tuple[str, int, int]],
                           check_of: CheckOf) -> list[bytes | BaseException]:
        """Read every range as :meth:`read_ranges` does, but let each fail on its own: for
        rounds whose requests do not depend on each other.

        Returns:
            The bytes of each range, or the exception raised for it.
        """
        out: list[bytes | BaseException] = [b""] * len(ranges)
        failures: dict[int, BaseException] = {}

        def sink(k: int, data: bytes | memoryview) -> None:
            out[k] = data if isinstance(data, bytes) else bytes(data)

        requests = _Round(self, [p for p, _, _ in ranges], [s for _, s, _ in ranges],
                          [e for _, _, e in ranges], check_of, min_groups=1)  # small pieces

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


class _Limits:
    """The bounds of one round: at most ``concurrency`` requests at once and ``budget`` bytes
    in flight (a single larger request may run alone). ``async with limits.hold(n)`` is held
    while a request of ``n`` bytes runs."""

    def __init__(self, concurrency: int, budget: int) -> None:
        self.requests = asyncio.Semaphore(max(1, concurrency))
        self.budget, self.used = budget, 0
        self.freed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def hold(self, n: int) -> AsyncIterator[None]:
        async with self.requests:
            async with self.freed:
                await self.freed.wait_for(lambda: self.used == 0 or self.used + n <= self.budget)
                self.used += n
            try:
                yield
            finally:
                async with self.freed:
                    self.used -= n
                    self.freed.notify_all()


class _Round:
    """The requests of one round of ranges: how they split into multi-range requests and lone
    ones, its bounds, and its hedger."""

    def __init__(self, client: StoreClient, paths: Sequence[str], starts: Sequence[int],
                 ends: Sequence[int], check_of: CheckOf, min_groups: int = MIN_GROUPS) -> None:
        self.client, self.check_of = client, check_of
        self.paths, self.starts, self.ends = list(paths), list(starts), list(ends)
        self.limits = _Limits(client.max_concurrency, client.max_inflight_bytes)
        self.groups: list[list[int]] = []
        self.todo = list(range(len(paths)))
        if client.http and len(paths) > 1:
            self.groups, self.todo = split_requests(paths, starts, ends, client.url,
                                                    min_groups=min_groups)
        self.hedger = client.policy.hedger(len(self.groups) + len(self.todo), client.counts)

    def fetch(self, k: int) -> Awaitable[bytes]:
        """Range ``k`` in a request of its own."""
        path = self.paths[k]
        return self.client.read_range(path, self.starts[k], self.ends[k], self.check_of(path),
                                      self.hedger)

    async def run(self, sink: RangeSink, fetch: Callable[[int], Awaitable[bytes]],
                  failures: dict[int, BaseException] | None = None,
                  merge_gap: int | None = None) -> None:
        """The multi-range requests and the lone ranges at once, then the ranges a
        multi-range answer did not hold, one request each, or merged through gaps of up to
        ``merge_gap`` bytes. ``failures``: where a failed request's exception is kept for each
        of its ranges, the other requests going on (default: the first failure cancels the
        others and is raised)."""
        left: list[int] = []
        await _all([*(self._group(members, sink, left, failures) for members in self.groups),
                    self._each(self.todo, fetch, sink)])
        if merge_gap is None or len(left) < 2:
            await self._each(left, fetch, sink)
            return
        reads, into = self._merged(left, merge_gap, sink)
        await self._each(reads, fetch, into)

    async def _each(self, todo: Sequence[int], fetch: Callable[[int], Awaitable[bytes]],
                    sink: RangeSink) -> None:
        """``fetch(k)`` for each ``k`` of ``todo`` within the limits, ``sink(k, data)`` as
        each arrives (``b""`` for empty ranges, not fetched)."""
        order = iter(todo)

        async def worker() -> None:
            for k in order:
                n = self.ends[k] - self.starts[k]
                if n <= 0:
                    sink(k, b"")
                    continue
                async with self.limits.hold(n):
                    data = await fetch(k)
                sink(k, data)

        await _all([worker() for _ in range(min(self.client.max_concurrency, len(todo)))])

    async def _group(self, members: list[int], sink: RangeSink, left: list[int],
                     failures: dict[int, BaseException] | None) -> None:
        """The ranges ``members`` (of one file) in one multi-range request; those the answer
        did not hold go to ``left``."""
        path = self.paths[members[0]]
        spans = [(self.starts[k], self.ends[k]) for k in members]
        done = [False] * len(members)

        def deliver(j: int, data: memoryview) -> None:
            if not done[j]:  # a retried request hands out again what came before
                done[j] = True
                sink(members[j], data)

        try:
            async with self.limits.hold(sum(b - a for a, b in spans)):
                got = await self.client.read_spans(path, spans, deliver, self.check_of(path),
                                                   self.hedger)
        except Exception as exc:
            if failures is None:
                raise
            failures.update((k, exc) for j, k in enumerate(members) if not done[j])
            return
        host = host_of(self.client.url(path))
        SUPPORT[host] = got is not None and all(done)
        if not SUPPORT[host]:
            log.info("%s answers no multi-range requests: one range per request from now on",
                     host)
        left.extend(k for j, k in enumerate(members) if not done[j])

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


async def _all(coros: Sequence[Awaitable[None]]) -> None:
    """Run ``coros`` at once; the first failure cancels the others (waited for) and is
    raised."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def plan_groups(starts: Sequence[int], ends: Sequence[int], *,
                max_header: int = MAX_RANGE_HEADER, group_bytes: int | None = None,
                min_groups: int | None = None) -> list[list[int]]:
    """Split ranges of one file into requests (a pure planner, no I/O).

    Args:
        starts: First byte of each range.
        ends: One past the last byte of each (``end > start``).
        max_header: Longest ``Range`` header of a request, in characters.
        group_bytes: About the most bytes of ranges per request (default
            :data:`GROUP_BYTES`).
        min_groups: Fewest requests for ranges of this many or more (fewer ranges: one each;
            default :data:`MIN_GROUPS`).

    Returns:
        The indices of the ranges of each request, ascending by start within a request.
    """
    group_bytes = GROUP_BYTES if group_bytes is None else group_bytes
    min_groups = MIN_GROUPS if min_groups is None else min_groups
    order = sorted(range(len(starts)), key=lambda k: (starts[k], ends[k]))
    total = sum(int(ends[k]) - int(starts[k]) for k in order)
    groups_wanted = max(min(min_groups, len(order)), -(-total // max(1, group_bytes)))
    target = -(-total // max(1, groups_wanted))
    out: list[list[int]] = []
    group: list[int] = []
    held = chars = 0
    for k in order:
        size = int(ends[k]) - int(starts[k])
        spec = len(f"{starts[k]}-{int(ends[k]) - 1},")
        if group and (held >= target or chars + spec > max_header):
            out.append(group)
            group, held, chars = [], 0, 0
        group.append(k)
        held += size
        chars += spec
    if group:
        out.append(group)
    return out


def split_requests(paths: Sequence[str], starts: Sequence[int], ends: Sequence[int],
                   url_of: Callable[[str], str], *,
                   min_groups: int = MIN_GROUPS) -> tuple[list[list[int]], list[int]]:
    """Which ranges go out together in multi-range requests (a pure planner, no I/O).

    Args:
        paths: The file of each range.
        starts: First byte of each range.
        ends: One past the last byte of each.
        url_of: A path's URL (whose host is looked up in :data:`SUPPORT`).
        min_groups: Fewest requests in all for the groups (:data:`MIN_GROUPS`; 1 for small
            ranges that gain nothing from arriving in several answers).

    Returns:
        The groups (ranges of one file, per request: :func:`plan_groups`, with at least
        ``min_groups`` requests in all), and the ranges to fetch one per request: those
        of hosts known not to answer multi-range requests, empty ones, and those a group
        would hold alone.
    """
    by_path: dict[str, list[int]] = {}
    singles: list[int] = []
    for k, path in enumerate(paths):
        if ends[k] > starts[k] and SUPPORT.get(host_of(url_of(path))) is not False:
            by_path.setdefault(path, []).append(k)
        else:
            singles.append(k)
    groups: list[list[int]] = []
    per_file = -(-min_groups // max(1, len(by_path)))  # many files: few requests per file
    for ks in by_path.values():
        for g in plan_groups([starts[k] for k in ks], [ends[k] for k in ks],
                             min_groups=per_file):
            if len(g) > 1:
                groups.append([ks[i] for i in g])
            else:
                singles.append(ks[g[0]])
    return groups, singles
