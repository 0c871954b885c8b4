"""Async pieces of the remote storage: a bound on bytes in flight, a pool of fetches run under
it, and an HTTP range GET that insists on getting exactly the range it asked for."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from ..errors import RangeReadError

T = TypeVar("T")

_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
#: The fsspec protocols served by HTTP servers (ranges through :func:`ranged_get`).
HTTP_PROTOCOLS = frozenset({"http", "https"})


#: What a read tells of the file it read, for its stamp check: ``await check(response
#: headers, the file's size from Content-Range or None)`` (see
#: :meth:`ofindex.storage.remote.FsspecStorage.fetch_range`).
StampCheck = Callable[[Mapping[str, str], "int | None"], Awaitable[None]]


def content_range(value: str) -> tuple[int, int] | None:
    """The first and last byte of a ``Content-Range: bytes a-b/size`` value, or ``None``."""
    got = _CONTENT_RANGE.fullmatch(value.strip())
    return None if got is None else (int(got.group(1)), int(got.group(2)))


def content_size(value: str) -> int | None:
    """The file size a ``Content-Range: bytes a-b/size`` value gives (``None``: not given)."""
    got = _CONTENT_RANGE.fullmatch(value.strip())
    return None if got is None or got.group(3) == "*" else int(got.group(3))


class ByteBudget:
    """At most ``limit`` bytes held at once (a single larger request may run alone)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.cond = asyncio.Condition()

    def hold(self, n: int) -> _Hold:
        return _Hold(self, n)


class _Hold:
    def __init__(self, budget: ByteBudget, n: int) -> None:
        self.budget, self.n = budget, n

    async def __aenter__(self) -> None:
        b = self.budget
        async with b.cond:
            await b.cond.wait_for(lambda: b.used == 0 or b.used + self.n <= b.limit)
            b.used += self.n

    async def __aexit__(self, *exc: object) -> None:
        b = self.budget
        async with b.cond:
            b.used -= self.n
            b.cond.notify_all()


class Limits:
    """The bounds of one round of requests: at most ``concurrency`` at once and ``budget``
    bytes in flight. ``limits(n)`` is held while a request of ``n`` bytes runs."""

    def __init__(self, concurrency: int, budget: int) -> None:
        self.requests = asyncio.Semaphore(max(1, concurrency))
        self.budget = ByteBudget(budget)

    @contextlib.asynccontextmanager
    async def __call__(self, n: int) -> AsyncIterator[None]:
        async with self.requests, self.budget.hold(n):
            yield


async def fetch_each(todo: Sequence[int], size: Callable[[int], int],
                     fetch: Callable[[int], Awaitable[bytes]],
                     sink: Callable[[int, bytes | memoryview], None], limits: Limits,
                     workers: int) -> None:
    """Run ``fetch(k)`` for each ``k`` of ``todo`` on ``workers`` tasks within ``limits``,
    calling ``sink(k, data)`` as each arrives (``b""`` for ranges of size 0, without
    fetching). The first failure cancels the others and is raised."""
    order = iter(todo)

    async def worker() -> None:
        for k in order:
            n = size(k)
            if n <= 0:
                sink(k, b"")
                continue
            async with limits(n):
                data = await fetch(k)
            sink(k, data)

    await run_all([worker() for _ in range(min(workers, len(todo)))])


async def run_all(coros: Sequence[Awaitable[None]]) -> None:
    """Run ``coros`` at once; the first failure cancels the others (waited for) and is
    raised."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@contextlib.asynccontextmanager
async def ranged_get(fs: Any, url: str, spec: str) -> AsyncIterator[Any]:
    """The response to ``GET url`` with ``Range: spec`` through fsspec's HTTP session (with the
    filesystem's request options).

    Raises:
        FileNotFoundError: The server answered 404.
        aiohttp.ClientResponseError: It answered another 4xx or 5xx.
    """
    kw = dict(getattr(fs, "kwargs", {}) or {})
    headers = dict(kw.pop("headers", None) or {})
    headers["Range"] = spec
    # the bytes of the file as stored (as fsspec's HEAD asks): a compressed answer would be
    # other bytes, and its ETag another version's
    headers["Accept-Encoding"] = "identity"
    session = await fs.set_session()
    async with session.get(fs.encode_url(url), headers=headers, **kw) as r:
        if r.status == 404:
            raise FileNotFoundError(url)
        if r.status >= 400:
            r.raise_for_status()
        yield r


async def http_range(fs: Any, url: str, start: int, end: int,
                     check: StampCheck | None = None) -> bytes:
    """GET ``Range: bytes=start-(end-1)`` and insist on ``206`` with that exact range;
    ``check`` is awaited with the response's headers before its body is read."""
    async with ranged_get(fs, url, f"bytes={start}-{end - 1}") as r:
        if r.status != 206:
            r.release()
            raise RangeReadError(
                f"{url}: asked for bytes [{start}, {end}) but the server answered "
                f"{r.status} instead of 206 Partial Content: it ignores Range requests, so the "
                "body is not the bytes asked for — refusing to return wrong data (serve the "
                "files from a server that supports ranges, e.g. nginx, or a bucket)"
            )
        if content_range(r.headers.get("Content-Range", "")) != (start, end - 1):
            raise RangeReadError(
                f"{url}: asked for bytes [{start}, {end}) but the server sent Content-Range "
                f"{r.headers.get('Content-Range')!r} — refusing to return wrong data"
            )
        if check is not None:
            await check(r.headers, content_size(r.headers.get("Content-Range", "")))
        data: bytes = await r.read()
        return data


def awaitable(fs: Any, method: str) -> Callable[..., Awaitable[Any]]:
    """``fs.<method>`` as a coroutine function: an asynchronous filesystem's own
    (``fs._<method>``, run on its loop, where a deadline can cut it), a synchronous one's
    wrapped (it runs at once when awaited).

    Args:
        fs: An fsspec filesystem.
        method: The name of a method both kinds have (``info``, ``ls``, ``cat_file`` …).

    Returns:
        The coroutine function.
    """
    if getattr(fs, "async_impl", False):
        found: Callable[..., Awaitable[Any]] = getattr(fs, "_" + method)
        return found
    blocking = getattr(fs, method)

    async def call(*args: Any, **kwargs: Any) -> Any:
        return blocking(*args, **kwargs)

    return call


def run_now(coro: Awaitable[T]) -> T:
    """The result of a coroutine that never suspends (one that awaits only
    :func:`awaitable` methods of a synchronous filesystem), without an event loop.

    Raises:
        RuntimeError: It suspended (it awaited something that is not ready).
    """
    step = coro.__await__()
    try:
        next(step)
    except StopIteration as done:
        result: T = done.value
        return result
    close = getattr(coro, "close", None)
    if close is not None:
        close()
    raise RuntimeError("a call of a synchronous filesystem waited for an event loop")
