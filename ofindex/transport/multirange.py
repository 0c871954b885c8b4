"""HTTP multi-range GETs: many byte ranges of one file in one request.

Static-file servers such as nginx and Apache answer ``Range: bytes=a-b,c-d,…`` with one
``206`` response of ``multipart/byteranges`` parts, one per range. A batch of random reads then
costs a few requests instead of one per range: on a busy client most of what a request costs
is CPU (building, sending and parsing it), not bytes, so this is what lets a batch read many
small spans far apart without reading the gaps between them.

Object stores do not (S3's GetObject serves one range per request): a host that answers a
multi-range GET with the whole file (its body is not read), with fewer ranges than asked, or
with a body that cannot be parsed (logged) is remembered as a single-range host for the rest
of the process (:data:`SUPPORT`), and the ranges it did not serve are fetched one per
request (a batch's data ranges merged again through the gaps a single-range request is
worth: :func:`ofindex.transport.gather.gather_ranges`). A host not tried yet is taken to answer
multi-range requests, as most web servers do: the first batch after open asks for the pages
of each sidecar it touches in one request, which tells the data round that follows how to
plan. Every part is checked against the ranges asked for: never wrong bytes.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from ..errors import RangeReadError
from .aio import StampCheck, content_range, content_size, ranged_get, run_all
from .byteranges import ByteRangesParser, Part, malformed

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
#: of :attr:`FsspecStorage.default_max_gap <ofindex.storage.remote.FsspecStorage>`): about
#: what a part costs in headers and parsing.
MULTI_RANGE_GAP = 16 << 10
#: Per-part overhead (boundary and headers) allowed in a response beyond the bytes asked for.
PART_OVERHEAD = 512
#: host -> whether it answered a multi-range GET with parts (absent: not tried yet).
SUPPORT: dict[str, bool] = {}

def host_of(url: str) -> str:
    """The scheme and host of ``url``: the key of :data:`SUPPORT`."""
    got = urlsplit(url)
    return f"{got.scheme}://{got.netloc}"


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


def range_header(spans: Sequence[tuple[int, int]]) -> str:
    """The ``Range`` header value asking for ``[start, end)`` spans (touching ones merged)."""
    merged: list[list[int]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return "bytes=" + ",".join(f"{a}-{b - 1}" for a, b in merged)


async def http_multi_range(fs: Any, url: str, spans: Sequence[tuple[int, int]],
                           deliver: Callable[[int, memoryview], None],
                           check: StampCheck | None = None) -> int | None:
    """GET the ``[start, end)`` spans of ``url`` in one request, handing each span out as soon
    as the part that holds it has arrived.

    Args:
        fs: fsspec's HTTP filesystem (its session and request options are used).
        url: The file.
        spans: The ranges.
        deliver: Called as ``deliver(j, bytes of span j)`` (from the event loop), once per
            span the answer holds.
        check: Awaited with the response's headers and the file's size before the first
            span is handed out (the storage's stamp check).

    Returns:
        The bytes of the body read, or ``None`` when the server answered with the whole file
        or with far more bytes than asked for (its body is not read).

    Raises:
        FileNotFoundError: The file does not exist.
        RangeReadError: The answer is malformed (the spans delivered before stay good).
        aiohttp.ClientResponseError: The server failed (retried by the caller when transient).
    """
    limit = sum(b - a for a, b in spans) + PART_OVERHEAD * (len(spans) + 1)
    order = sorted(range(len(spans)), key=lambda j: spans[j])
    firsts = [spans[j][0] for j in order]

    def hand_out(part: Part) -> None:
        i = bisect.bisect_left(firsts, part.start)
        while i < len(order) and firsts[i] < part.end:
            j = order[i]
            if spans[j][1] <= part.end:
                deliver(j, part.data[spans[j][0] - part.start : spans[j][1] - part.start])
            i += 1

    async with ranged_get(fs, url, range_header(spans)) as r:
        length = r.headers.get("Content-Length")
        if r.status != 206 or length is None or int(length) > limit:
            r.close()  # the whole file, or a span much larger than asked: do not read it
            return None
        body = bytearray(int(length))
        view = memoryview(body)
        content_type = r.headers.get("Content-Type", "")
        parser = (ByteRangesParser(body, content_type, url)
                  if content_type.lower().startswith("multipart/") else None)
        headers = r.headers
        got = 0
        async for chunk in r.content.iter_any():
            if got + len(chunk) > len(body):
                raise malformed(url, f"the body is longer than its Content-Length {length}")
            view[got : got + len(chunk)] = chunk
            got += len(chunk)
            for part in parser.feed(got) if parser is not None else ():
                if check is not None:  # before any byte of the file is handed out
                    await check(headers, part.size)
                    check = None
                hand_out(part)
        if got != len(body):
            raise malformed(url, f"the body ends after {got} of {length} bytes")
    if parser is not None:
        parser.finish()
        return got
    # one range for all (a server may coalesce ranges, or answer the first only)
    single = content_range(headers.get("Content-Range", ""))
    if single is None or single[1] - single[0] + 1 != len(body):
        raise malformed(url, f"Content-Range {headers.get('Content-Range')!r} for a body "
                        f"of {len(body)} bytes")
    if check is not None:
        await check(headers, content_size(headers.get("Content-Range", "")))
    hand_out(Part(single[0], single[1] + 1, view))
    return got


async def fetch_spans(fs: Any, url: str, spans: Sequence[tuple[int, int]],
                      deliver: Callable[[int, memoryview], None],
                      check: StampCheck | None = None) -> int | None:
    """:func:`http_multi_range`, a malformed answer counting as one without parts (logged: the
    caller then asks for the spans not delivered one by one, each answer checked; the caller's
    retry policy bounds the time it takes)."""
    try:
        return await http_multi_range(fs, url, spans, deliver, check)
    except RangeReadError as exc:
        log.warning("%s", exc)
        return None


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


async def fetch_groups(
    groups: Sequence[list[int]], paths: Sequence[str], starts: Sequence[int],
    ends: Sequence[int], sink: Callable[[int, bytes | memoryview], None], *,
    url_of: Callable[[str], str],
    request: Callable[[str, list[tuple[int, int]], Callable[[int, memoryview], None]],
                      Awaitable[int | None]],
    limit: Callable[[int], Any],
    failures: dict[int, BaseException] | None = None,
) -> list[int]:
    """Fetch each group of ranges (of one file) in one multi-range request.

    Args:
        groups: The ranges of each request (:func:`split_requests`).
        paths: The file of each range.
        starts: First byte of each range.
        ends: One past the last byte of each.
        sink: Called as ``sink(k, bytes of range k)`` as each range arrives, once per range.
        url_of: A path's URL (its host's entry in :data:`SUPPORT` is set from the answers).
        request: ``request(path, spans, deliver)`` fetches spans in one request, calling
            ``deliver(j, data)`` for each span it got (retried: see :func:`fetch_spans`).
        limit: ``limit(n)`` is an async context manager held while a request of ``n`` bytes
            runs (the caller's bounds on requests and bytes in flight).
        failures: Where a failed request's exception is kept for each of its ranges not
            delivered, the other requests going on (default: the first failure cancels the
            others and is raised).

    Returns:
        The ranges the answers did not hold, to fetch one per request.
    """
    left: list[int] = []

    async def one(members: list[int]) -> None:
        path = paths[members[0]]
        spans = [(int(starts[k]), int(ends[k])) for k in members]
        done = [False] * len(members)

        def deliver(j: int, data: memoryview) -> None:
            if not done[j]:  # a retried request hands out again what came before
                done[j] = True
                sink(members[j], data)

        try:
            async with limit(sum(b - a for a, b in spans)):
                got = await request(path, spans, deliver)
        except Exception as exc:
            if failures is None:
                raise
            failures.update((k, exc) for j, k in enumerate(members) if not done[j])
            return
        host = host_of(url_of(path))
        SUPPORT[host] = got is not None and all(done)
        if not SUPPORT[host]:
            log.info("%s answers no multi-range requests: one range per request from now on",
                     host)
        left.extend(k for j, k in enumerate(members) if not done[j])

    await run_all([one(g) for g in groups])  # a failure cancels the other requests
    return left
